package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultPath is read when --config is not given; a missing file there means
// the embedded defaults.
const DefaultPath = "/etc/minicri/minicri.toml"

// Flags binds one flag per scalar configuration key to a FlagSet. Values are
// only recorded while parsing: Load applies them over the file, so that flags
// win whatever order things were given in.
type Flags struct {
	ConfigPath string
	set        []setting
}

type setting struct {
	key, value string
}

// Register adds --config and a flag for every scalar key, named after the key
// with dots and underscores turned into dashes (run_dir → --run-dir,
// streaming.port → --streaming-port). Tables of named entries (runtime
// handlers, registries) are set in the file only.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.ConfigPath, "config", "", "Configuration file (TOML). Default "+DefaultPath+"; a missing default file means built-in defaults.")
	def := Default()
	for _, l := range leaves(reflect.ValueOf(&def).Elem(), "") {
		key := l.key
		usage := l.comment
		if dv := formatFlagDefault(l.value); dv != "" {
			usage += " (default " + dv + ")"
		}
		if l.value.Kind() == reflect.Bool {
			fs.BoolFunc(FlagName(key), usage, func(v string) error { return f.record(key, v) })
			continue
		}
		fs.Func(FlagName(key), usage, func(v string) error { return f.record(key, v) })
	}
}

func (f *Flags) record(key, v string) error {
	// Parse now so that a bad flag value fails at flag parsing, naming the flag.
	probe := Default()
	if err := setLeaf(&probe, key, v); err != nil {
		return err
	}
	f.set = append(f.set, setting{key, v})
	return nil
}

// FlagName is the command-line flag for a configuration key.
func FlagName(key string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(key)
}

// Load builds the effective configuration: defaults, then the file, then the
// flags recorded by Register. The result is validated.
func (f *Flags) Load() (Config, error) {
	path, explicit := f.ConfigPath, f.ConfigPath != ""
	if !explicit {
		path = DefaultPath
	}
	cfg, err := LoadFile(path, explicit)
	if err != nil {
		return Config{}, err
	}
	for _, s := range f.set {
		if err := setLeaf(&cfg, s.key, s.value); err != nil {
			return Config{}, err
		}
	}
	cfg.fillDerived()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// LoadFile reads a TOML file over the defaults. A missing file is an error
// only when mustExist is set. Unknown keys are refused so that a typo does not
// silently leave a default in place.
func LoadFile(path string, mustExist bool) (Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !mustExist {
		return cfg, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	// Decoding into the defaults' handler map would merge into it; a file that
	// names handlers means exactly those handlers.
	cfg.Runtime.Handlers = nil
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return Config{}, fmt.Errorf("config file %s: unknown key %q", path, undecoded[0].String())
	}
	if cfg.Runtime.Handlers == nil {
		cfg.Runtime.Handlers = Default().Runtime.Handlers
	}
	return cfg, nil
}

// profileSocketName is the default pprof socket's name in the run dir.
const profileSocketName = "debug.sock"

// fillDerived fills values whose defaults depend on other keys.
func (c *Config) fillDerived() {
	if c.ProfileAddress == Default().ProfileAddress {
		c.ProfileAddress = filepath.Join(c.RunDir, profileSocketName)
	}
	for name, h := range c.Runtime.Handlers {
		if h.Path == "" {
			h.Path = name
		}
		if h.Root == "" {
			h.Root = filepath.Join(c.RunDir, "runtime", name)
		}
		c.Runtime.Handlers[name] = h
	}
	if c.Image.Registries == nil {
		c.Image.Registries = map[string]RegistryConfig{}
	}
	if c.Image.PinnedImages == nil {
		c.Image.PinnedImages = map[string]string{}
	}
}

// leaf is one scalar configuration key and the field that holds it.
type leaf struct {
	key     string
	comment string
	value   reflect.Value
}

// leaves lists the scalar keys of a struct, depth first, in field order.
// Maps are skipped: their keys are names chosen by the user.
func leaves(v reflect.Value, prefix string) []leaf {
	var out []leaf
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := prefix + f.Tag.Get("toml")
		fv := v.Field(i)
		switch {
		case fv.Kind() == reflect.Map:
			continue
		case fv.Kind() == reflect.Struct:
			out = append(out, leaves(fv, key+".")...)
		default:
			out = append(out, leaf{key, fieldDoc(t, f), fv})
		}
	}
	return out
}

var durationType = reflect.TypeOf(Duration(0))

// setLeaf parses a flag's text into the field named by key.
func setLeaf(cfg *Config, key, text string) error {
	for _, l := range leaves(reflect.ValueOf(cfg).Elem(), "") {
		if l.key != key {
			continue
		}
		bad := func(err error) error {
			return &InvalidError{key, fmt.Sprintf("bad value %q for --%s: %v", text, FlagName(key), err)}
		}
		switch {
		case l.value.Type() == durationType:
			var d Duration
			if err := d.UnmarshalText([]byte(text)); err != nil {
				return bad(err)
			}
			l.value.Set(reflect.ValueOf(d))
		case l.value.Kind() == reflect.String:
			l.value.SetString(text)
		case l.value.Kind() == reflect.Int || l.value.Kind() == reflect.Int64:
			n, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return bad(errors.New("not an integer"))
			}
			l.value.SetInt(n)
		case l.value.Kind() == reflect.Float64:
			f, err := strconv.ParseFloat(text, 64)
			if err != nil {
				return bad(errors.New("not a number"))
			}
			l.value.SetFloat(f)
		case l.value.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(text)
			if err != nil {
				return bad(errors.New("not true or false"))
			}
			l.value.SetBool(b)
		case l.value.Kind() == reflect.Slice:
			var items []string
			for _, s := range strings.Split(text, ",") {
				if s = strings.TrimSpace(s); s != "" {
					items = append(items, s)
				}
			}
			l.value.Set(reflect.ValueOf(items))
		default:
			return fmt.Errorf("config key %q: no flag parser for %s", key, l.value.Type())
		}
		return nil
	}
	return fmt.Errorf("config key %q: unknown", key)
}

func formatFlagDefault(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return v.Interface().(Duration).Std().String()
	case v.Kind() == reflect.Slice:
		return strings.Join(v.Interface().([]string), ",")
	case v.IsZero():
		return ""
	default:
		return fmt.Sprint(v.Interface())
	}
}

// Render writes cfg as a TOML file with the comment of every key above it:
// what `minicri config` prints, and a valid file to start from. A key whose
// default follows the node and is left unset (cgroup_driver) is written
// commented out, with what it resolves to on node and why.
func Render(cfg Config, node Node) string {
	var b strings.Builder
	b.WriteString("# minicri configuration. Every key is optional: a missing key keeps the\n")
	b.WriteString("# default shown here. Every scalar key is also a flag: run_dir → --run-dir,\n")
	b.WriteString("# streaming.port → --streaming-port. Flags win over this file.\n")
	notes := func(key string) (string, string) { return nodeNote(key, cfg, node) }
	renderStruct(&b, reflect.ValueOf(cfg), "", notes)
	return b.String()
}

func renderStruct(b *strings.Builder, v reflect.Value, table string, notes func(key string) (note, resolved string)) {
	t := v.Type()
	var nested []int
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if k := v.Field(i).Kind(); k == reflect.Struct && f.Type != durationType || k == reflect.Map {
			nested = append(nested, i)
			continue
		}
		writeComment(b, fieldDoc(t, f))
		note, resolved := notes(joinKey(table, f.Tag.Get("toml")))
		writeComment(b, note)
		if resolved != "" {
			fmt.Fprintf(b, "# %s = %s\n", f.Tag.Get("toml"), tomlValue(resolved))
			continue
		}
		fmt.Fprintf(b, "%s = %s\n", f.Tag.Get("toml"), tomlValue(v.Field(i).Interface()))
	}
	for _, i := range nested {
		f := t.Field(i)
		name := joinKey(table, f.Tag.Get("toml"))
		fv := v.Field(i)
		b.WriteString("\n")
		writeComment(b, fieldDoc(t, f))
		if fv.Kind() == reflect.Struct {
			fmt.Fprintf(b, "[%s]\n", name)
			renderStruct(b, fv, name, notes)
			continue
		}
		keys := make([]string, 0, fv.Len())
		for _, k := range fv.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		if fv.Type().Elem().Kind() == reflect.String {
			renderStringTable(b, name, keys, fv)
			continue
		}
		if len(keys) == 0 {
			fmt.Fprintf(b, "# [%s.\"NAME\"]\n", name)
		}
		for _, k := range keys {
			sub := name + "." + strconv.Quote(k)
			fmt.Fprintf(b, "[%s]\n", sub)
			renderStruct(b, fv.MapIndex(reflect.ValueOf(k)), sub, notes)
		}
	}
}

// renderStringTable writes a table of NAME = "VALUE" entries
// (image.pinned_images), with an example line when it is empty.
func renderStringTable(b *strings.Builder, name string, keys []string, fv reflect.Value) {
	fmt.Fprintf(b, "[%s]\n", name)
	if len(keys) == 0 {
		b.WriteString("# NAME = \"REFERENCE\"\n")
	}
	for _, k := range keys {
		fmt.Fprintf(b, "%s = %s\n", tomlKey(k), tomlValue(fv.MapIndex(reflect.ValueOf(k)).String()))
	}
}

// tomlKey quotes a key that is not a bare TOML key.
func tomlKey(k string) string {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// fieldDoc is what an operator is told of a field of t: its doc comment in
// config.go, kept in fieldDocs.
func fieldDoc(t reflect.Type, f reflect.StructField) string {
	return fieldDocs[t.Name()+"."+f.Name]
}

func writeComment(b *strings.Builder, comment string) {
	if comment != "" {
		fmt.Fprintf(b, "# %s\n", comment)
	}
}

func joinKey(table, key string) string {
	if table == "" {
		return key
	}
	return table + "." + key
}

// tomlValue formats one value with the TOML encoder, so quoting is TOML's.
func tomlValue(v any) string {
	var b strings.Builder
	if err := toml.NewEncoder(&b).Encode(map[string]any{"v": v}); err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	return strings.TrimSpace(strings.TrimPrefix(b.String(), "v = "))
}

// Diff names the keys whose values differ between a and b: scalar keys
// by name, a map (runtime.handlers, image.registries) by its table.
func Diff(a, b Config) []string {
	var out []string
	var walk func(va, vb reflect.Value, prefix string)
	walk = func(va, vb reflect.Value, prefix string) {
		t := va.Type()
		for i := 0; i < t.NumField(); i++ {
			key := prefix + t.Field(i).Tag.Get("toml")
			fa, fb := va.Field(i), vb.Field(i)
			if fa.Kind() == reflect.Struct {
				walk(fa, fb, key+".")
				continue
			}
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, key)
			}
		}
	}
	walk(reflect.ValueOf(a), reflect.ValueOf(b), "")
	return out
}
