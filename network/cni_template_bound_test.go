package network

import (
	"errors"
	"strings"
	"testing"
	"text/template"
)

// kubenetTemplate is the kubenet-shaped config many containerd nodes are
// given as conf_template, around containerd's documented ipam example.
const kubenetTemplate = `{
    "cniVersion": "0.3.1",
    "name": "kubenet",
    "plugins": [{
    "type": "bridge",
    "bridge": "cbr0",
    "mtu": 1500,
    "isGateway": true,
    "ipam": {
        "type": "host-local",
        "ranges": [{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}],
        "routes": [{{range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst": "{{$route}}"}{{end}}]
    }
    },
    {
    "type": "portmap",
    "capabilities": {"portMappings": true}
    }]
}
`

// templateCases are run by both text/template and executeTemplate; the
// outputs must be equal byte for byte, or both must fail.
var templateCases = []string{
	containerdTemplate,
	kubenetTemplate,
	``,
	`plain text, no actions`,
	`{{.PodCIDR}}`,
	`{{.PodCIDRRanges}} {{.Routes}} {{.}} {{$}} {{$.PodCIDR}}`,
	`{{- .PodCIDR -}}  x  {{- /* a comment */ -}} y {{/* another */}} z`,
	"a\n  {{- .PodCIDR}}\n  {{.Routes -}}\n  b",
	`{{if .PodCIDR}}set{{else}}unset{{end}}`,
	`{{if eq .PodCIDR "10.88.0.0/16"}}A{{else if eq .PodCIDR "fd00::/64"}}B{{else}}C{{end}}`,
	`{{if ne (len .Routes) 1}}dual{{end}}`,
	`{{if and .PodCIDR (gt 1 0)}}x{{end}}`,
	`{{range .Routes}}[{{.}}]{{else}}none{{end}}`,
	`{{range $r := .Routes}}{{$r}},{{end}}`,
	`{{range $i, $r := .PodCIDRRanges}}{{$i}}={{$r}};{{range $.Routes}}{{.}}|{{end}}{{end}}`,
	`{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}{{if eq $i 0}}first{{end}}{{$r}}{{end}}`,
	`{{range $e := .Routes}}{{else}}{{$e}}{{end}}`,
	`{{$x := .PodCIDR}}{{$x}}{{$x = "changed"}}{{$x}}`,
	`{{$n := 0}}{{range .Routes}}{{$n = len .}}{{end}}{{$n}}`,
	`{{$i := 9}}{{$e := "e"}}{{range $i, $e = .Routes}}{{end}}{{$i}} {{$e}}`,
	`{{with .PodCIDR}}({{.}}){{else}}no cidr{{end}}`,
	`{{with $c := index .PodCIDRRanges 0}}{{$c}}{{end}}`,
	`{{with .Routes}}{{index . 0}}{{end}}`,
	`{{with .PodCIDR}}a{{else with .Routes}}b{{else}}c{{end}}`,
	`{{len .PodCIDRRanges}} {{len .PodCIDR}} {{.Routes | len}}`,
	`{{index .PodCIDRRanges 1}}`,
	`{{index .PodCIDR 0}} {{index "ab" 1 | printf "%c"}}`,
	`{{index .Routes}}`,
	`{{printf "%s-%d-%v-%q" .PodCIDR 3 .Routes .PodCIDR}}`,
	`{{print .PodCIDR 1 2 "a" "b" nil}}|{{println .Routes 1}}|{{printf "%v" nil}}`,
	`{{.PodCIDR | printf "%s/x"}} {{.PodCIDR | print "p" | printf "%q"}}`,
	`{{not .PodCIDR}} {{not .Routes}} {{and .PodCIDR .Routes}} {{or .PodCIDR "dflt"}} {{or "" 0}}`,
	`{{and}}`,
	`{{3}} {{1.5}} {{1e3}} {{0x10}} {{'a'}} {{1i}} {{true}} {{"s"}} {{-7}}`,
	`{{99999999999999999999}}`,
	`{{eq 1 1 2}} {{eq "a" "b" "a"}} {{eq .Routes nil}} {{eq 1.0 1.0}} {{ne true false}}`,
	`{{eq (index "a" 0) 97}}`,
	`{{eq 1 "a"}}`,
	`{{eq .Routes .Routes}}`,
	`{{eq .PodCIDR}}`,
	`{{lt 1 2}} {{le 2 2}} {{gt "b" "a"}} {{ge 1.5 2.5}} {{lt (index "a" 0) 98}} {{gt -1 (index "a" 0)}}`,
	`{{if gt (len .Routes) 1}}dual{{else}}single{{end}}`,
	`{{lt 1 "a"}}`,
	`{{lt true false}}`,
	`{{le .Routes .Routes}}`,
	`{{gt 1}}`,
	`{{range 3}}{{.}}{{end}}`,
	`{{range $i := 2}}{{$i}}{{end}}{{range 0}}x{{else}}empty{{end}}`,
	`{{range $i, $e := 2}}{{end}}`,
	`{{range .PodCIDR}}{{end}}`,
	`{{range .Routes}}{{if eq . "::/0"}}{{break}}{{end}}{{.}}{{end}}`,
	`{{range .Routes}}{{if eq . "0.0.0.0/0"}}{{continue}}{{end}}{{.}}{{end}}`,
	`{{(index .Routes 0)}} {{(.PodCIDR)}} {{(print "a")}}`,
	`{{.Nope}}`,
	`{{.PodCIDR.Foo}}`,
	`{{$.Routes.Len}}`,
	`{{.PodCIDR "arg"}}`,
	`{{"x" | .PodCIDR}}`,
	`{{3 4}}`,
	`{{nil}}`,
	`{{len 3}}`,
	`{{index .Routes 5}}`,
	`{{index .Routes -1}}`,
	`{{index .Routes "a"}}`,
	`{{index .PodCIDR 0 1}}`,
	`{{printf 3}}`,
	`{{not}}`,
	`{{not 1 2}}`,
	`{{ne 1}}`,
	`{{nosuchfunc 1}}`,
	`{{.PodCIDR`,
	`{{if}}{{end}}`,
	`{{end}}`,
	`{{$undefined}}`,
	`{{break}}`,
	`{{range .Routes}}{{.}}`,
	`{{$x := 1}}{{if true}}{{$x := 2}}{{$x}}{{end}}{{$x}}`,
	`{{html .PodCIDR}} {{js .Routes}} {{urlquery "a b"}} {{slice .PodCIDR 1 3}} {{index .Routes 0 | printf "%q"}}`,
	`{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}`,
	`{{if $y := .PodCIDR}}{{$y}}{{else}}{{$y}}!{{end}}`,
}

var templateValueCases = map[string]TemplateValues{
	"single": NewTemplateValues([]string{"10.88.0.0/16"}),
	"v6":     NewTemplateValues([]string{"fd00::/64"}),
	"dual":   NewTemplateValues([]string{"10.88.0.0/16", "fd00::/64"}),
	"empty":  {},
}

// textTemplate runs src with text/template alone, as containerd does.
func textTemplate(src string, values TemplateValues) (string, error) {
	t, err := template.New("conf.tmpl").Option("missingkey=error").Parse(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = t.Execute(&b, values)
	return b.String(), err
}

// TestBoundedTemplateMatchesTextTemplate: the bounds change no template's
// output (the tick in every range body writes nothing, break and continue
// still work), nor whether it fails.
func TestBoundedTemplateMatchesTextTemplate(t *testing.T) {
	for name, values := range templateValueCases {
		for _, src := range templateCases {
			t.Run(name, func(t *testing.T) {
				got, err := executeTemplate("conf.tmpl", src, values)
				want, wantErr := textTemplate(src, values)
				switch {
				case (err != nil) != (wantErr != nil):
					t.Errorf("template %q on %+v:\nbounded: %q, %v\ntext/template: %q, %v", src, values, got, err, want, wantErr)
				case err == nil && string(got) != want:
					t.Errorf("template %q on %+v:\nbounded:       %q\ntext/template: %q", src, values, got, want)
				}
			})
		}
	}
}

// TestExecuteTemplateRefusesTemplateCalls: {{template}} and {{block}} could
// recurse past every bound, so they fail the template, with where they are.
func TestExecuteTemplateRefusesTemplateCalls(t *testing.T) {
	for _, src := range []string{
		`{{define "x"}}X{{end}}{{template "x"}}`,
		`{{block "b" .}}B{{end}}`,
		`{{range .Routes}}{{if .}}{{template "x"}}{{end}}{{end}}`,
		`{{define "x"}}{{template "x"}}{{template "x"}}{{end}}{{with 1}}{{else}}{{template "x"}}{{end}}`,
	} {
		_, err := executeTemplate("conf.tmpl", src, NewTemplateValues([]string{"10.88.0.0/16"}))
		if !errors.Is(err, errUnsupported) || !strings.Contains(err.Error(), "{{template") || !strings.Contains(err.Error(), "conf.tmpl:1:") {
			t.Errorf("executeTemplate(%q) = %v, want an errUnsupported naming {{template}} at conf.tmpl:1", src, err)
		}
	}
}

// TestExecuteTemplateIsBounded: a template that would run for ever or
// fill memory fails instead (the kubelet would run it at every sync).
func TestExecuteTemplateIsBounded(t *testing.T) {
	for src, want := range map[string]string{
		`{{range 9223372036854775807}}{{end}}`:              "range iterations",
		`{{range 2000}}{{range 2000}}{{end}}{{end}}`:        "range iterations",
		`{{$n := 99999999}}{{range $n}}{{continue}}{{end}}`: "range iterations",
		`{{range 10000}}{{printf "%200s" "x"}}{{end}}`:      "output over",
		`{{range 10000}}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{{end}}`: "output over",
		`{{range 10}}{{printf "%999999s" "x"}}{{end}}`: "output over",
	} {
		_, err := executeTemplate("conf.tmpl", src, TemplateValues{})
		if !errors.Is(err, errTooBig) || !strings.Contains(err.Error(), want) {
			t.Errorf("executeTemplate(%q) = %v, want an error saying %q", src, err, want)
		}
	}
}
