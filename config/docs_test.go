package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// unsetKey is a key Render writes commented out, left for the node to decide.
var unsetKey = regexp.MustCompile(`^# ([a-z_]+) = `)

// configKeys reads the keys of `minicri config`'s output (Render): "table.key"
// for a scalar, also one left unset (commented out), and a table of named
// entries as its header with the name made generic ([runtime.handlers.NAME])
// followed by its keys.
func configKeys(text string) (scalars []string, named map[string][]string) {
	named = map[string][]string{}
	table, entry := "", ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case unsetKey.MatchString(line) && entry == "":
			scalars = append(scalars, table+unsetKey.FindStringSubmatch(line)[1])
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "["):
			header := strings.Trim(line, "[]")
			if i := strings.IndexByte(header, '"'); i >= 0 {
				table, entry = "", header[:i-1]
				continue
			}
			table, entry = header+".", ""
		default:
			key, _, _ := strings.Cut(line, " = ")
			if entry != "" {
				named[entry] = append(named[entry], key)
				continue
			}
			scalars = append(scalars, table+key)
		}
	}
	return scalars, named
}

// Every key that `minicri config` prints is in docs/configuration.md, and
// every key the doc's table names exists.
func TestConfigurationDocNamesEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	cfg := Default()
	cfg.Image.Registries = map[string]RegistryConfig{"registry.example": {}}
	scalars, named := configKeys(Render(cfg, Node{}))
	if len(scalars) == 0 || len(named) == 0 {
		t.Fatalf("read no keys from minicri config's output:\n%s", Render(cfg, Node{}))
	}
	known := map[string]bool{}
	for _, key := range scalars {
		known[key] = true
		if !strings.Contains(doc, "`"+key+"`") {
			t.Errorf("key %s is not in docs/configuration.md", key)
		}
	}
	generic := map[string]string{"runtime.handlers": "NAME", "image.registries": `"HOST"`}
	for table, keys := range named {
		header := "[" + table + "." + generic[table] + "]"
		if !strings.Contains(doc, header) {
			t.Errorf("table %s is not in docs/configuration.md", header)
		}
		for _, key := range keys {
			if !strings.Contains(doc, "`"+key+"`") {
				t.Errorf("key %s of %s is not in docs/configuration.md", key, header)
			}
		}
	}
	firstCell := regexp.MustCompile("^\\| ([^|]+) \\|")
	quoted := regexp.MustCompile("`([a-z_.]+)`")
	for _, line := range strings.Split(doc, "\n") {
		cell := firstCell.FindStringSubmatch(line)
		if cell == nil {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(cell[1], -1) {
			if !known[m[1]] {
				t.Errorf("docs/configuration.md names key %s, which minicri config does not print", m[1])
			}
		}
	}
}
