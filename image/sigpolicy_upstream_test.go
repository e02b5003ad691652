package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The test vectors of containers/image's own evaluator, run against
// sigpolicy.go: its tables of reference matches (matchExact,
// matchRepoDigestOrExact, matchRepository, exactReference,
// exactRepository, remapIdentity), its scope precedence cases, its policy
// fixture and its cosign-signed image fixtures. They are read from the
// module cache, not copied: the tables are Go source, evaluated here with
// go/types, so they stay upstream's word for word. The Makefile's unit
// target downloads this version; without it the test is skipped, saying how
// to get it. Where minicri differs on purpose (TestUpstreamPolicyFixture),
// docs/images.md says why.
const upstreamImageModule = "github.com/containers/image/v5@v5.36.2"

// upstreamSignatureDir is the module's signature package, or a skip.
func upstreamSignatureDir(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(filepath.SplitList(build.Default.GOPATH)[0], "pkg", "mod")
	}
	dir := filepath.Join(cache, upstreamImageModule, "signature")
	if _, err := os.Stat(filepath.Join(dir, "policy_reference_match_test.go")); err != nil {
		t.Skipf("containers/image's test vectors are not in the module cache (%v): go mod download %s", err, upstreamImageModule)
	}
	return dir
}

// upstreamTables evaluates the tables of constant structs of a Go test
// file: package-level ones by their variable's name, those written inside
// a function as "Func#N", the Nth table of that function. Each row is its
// fields' values in order; a field that is not a constant is nil.
func upstreamTables(t *testing.T, file string) map[string][][]constant.Value {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	// The file's imports (testify, the reference package) are not needed
	// for its constants: their errors are ignored.
	conf := types.Config{Importer: failingImporter{}, Error: func(error) {}}
	_, _ = conf.Check("upstream", fset, []*ast.File{f}, info)

	rowsOf := func(lit *ast.CompositeLit) [][]constant.Value {
		var rows [][]constant.Value
		for _, e := range lit.Elts {
			row, ok := e.(*ast.CompositeLit)
			if !ok {
				continue
			}
			var vals []constant.Value
			for _, field := range row.Elts {
				if kv, ok := field.(*ast.KeyValueExpr); ok {
					field = kv.Value
				}
				vals = append(vals, info.Types[field].Value)
			}
			rows = append(rows, vals)
		}
		return rows
	}
	tables := map[string][][]constant.Value{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, s := range d.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok || d.Tok != token.VAR {
					continue
				}
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.CompositeLit); ok {
						tables[vs.Names[i].Name] = rowsOf(lit)
					}
				}
			}
		case *ast.FuncDecl:
			n := 0
			ast.Inspect(d.Body, func(node ast.Node) bool {
				lit, ok := node.(*ast.CompositeLit)
				if !ok {
					return true
				}
				if at, ok := lit.Type.(*ast.ArrayType); ok {
					if _, ok := at.Elt.(*ast.StructType); ok {
						tables[fmt.Sprintf("%s#%d", d.Name.Name, n)] = rowsOf(lit)
						n++
						return false
					}
				}
				return true
			})
		}
	}
	return tables
}

type failingImporter struct{}

func (failingImporter) Import(path string) (*types.Package, error) {
	return nil, errors.New("not imported")
}

// table is one upstream table, each row checked to have the field kinds
// want ("s" a string, "b" a bool), so that a changed table fails loudly
// rather than test nothing.
func table(t *testing.T, tables map[string][][]constant.Value, name, want string) [][]constant.Value {
	t.Helper()
	rows := tables[name]
	if len(rows) == 0 {
		t.Fatalf("upstream table %s not found or empty", name)
	}
	for _, r := range rows {
		if len(r) != len(want) {
			t.Fatalf("upstream table %s: row of %d fields, want %d", name, len(r), len(want))
		}
		for i, v := range r {
			kind := map[byte]constant.Kind{'s': constant.String, 'b': constant.Bool}[want[i]]
			if v == nil || v.Kind() != kind {
				t.Fatalf("upstream table %s: field %d is %v, want a constant of kind %v", name, i, v, kind)
			}
		}
	}
	return rows
}

func str(v constant.Value) string { return constant.StringVal(v) }

// checkVector compares one answer with upstream's.
func checkVector(t *testing.T, name string, got, want bool) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, containers/image says %v", name, got, want)
	}
}

// matchOf is the rule of kind's answer for an image reference and a
// signature's docker-reference; an image reference that does not parse is
// no case (upstream skips those too), reported by ok.
func matchOf(rule identityRule, imageRef, sigRef string) (matched, ok bool) {
	img, err := parseIdentity(imageRef)
	if err != nil {
		return false, false
	}
	return rule.matches(img, sigRef), true
}

func TestUpstreamSignedIdentityVectors(t *testing.T) {
	dir := upstreamSignatureDir(t)
	tables := upstreamTables(t, filepath.Join(dir, "policy_reference_match_test.go"))
	exact := table(t, tables, "prmExactMatchTestTable", "ssb")
	repository := table(t, tables, "prmRepositoryMatchTestTable", "ssb")
	digestOrExact := table(t, tables, "matchRepoDigestOrExactTestTable", "ssb")

	// Symmetric tables, both ways; "possibly invalid" image refs skipped.
	both := func(kind string, rule func(refA string) (identityRule, bool), rows [][]constant.Value, only func(bool) bool) {
		for _, r := range rows {
			a, b, want := str(r[0]), str(r[1]), constant.BoolVal(r[2])
			if !only(want) {
				continue
			}
			for _, p := range [][2]string{{a, b}, {b, a}} {
				name := fmt.Sprintf("%s(image %q, signed %q)", kind, p[0], p[1])
				m, valid := rule(p[0])
				if !valid {
					checkVector(t, name, false, want) // an invalid rule matches nothing
					continue
				}
				got, ok := matchOf(m, p[0], p[1])
				if ok {
					checkVector(t, name, got, want)
				}
			}
		}
	}
	fixed := func(kind string) func(string) (identityRule, bool) {
		return func(string) (identityRule, bool) { return identityRule{kind: kind}, true }
	}
	all := func(bool) bool { return true }
	accepted := func(b bool) bool { return b }
	refused := func(b bool) bool { return !b }
	both("matchExact", fixed("matchExact"), exact, all)
	both("matchRepository", fixed("matchRepository"), repository, all)
	// matchRepoDigestOrExact accepts all matchExact accepts and refuses all
	// matchRepository refuses, and has asymmetric cases of its own.
	both("matchRepoDigestOrExact", fixed("matchRepoDigestOrExact"), exact, accepted)
	both("matchRepoDigestOrExact", fixed("matchRepoDigestOrExact"), repository, refused)
	for _, r := range digestOrExact {
		name := fmt.Sprintf("matchRepoDigestOrExact(image %q, signed %q)", str(r[0]), str(r[1]))
		got, ok := matchOf(identityRule{kind: "matchRepoDigestOrExact"}, str(r[0]), str(r[1]))
		if !ok {
			t.Fatalf("%s: image reference does not parse", name)
		}
		checkVector(t, name, got, constant.BoolVal(r[2]))
	}
	// exactReference and exactRepository: the policy's reference is the
	// table's first, whatever the image (upstream's factory).
	withReference := func(kind string) func(string) (identityRule, bool) {
		return func(ref string) (identityRule, bool) {
			id, err := parseIdentity(ref)
			return identityRule{kind: kind, reference: id}, err == nil
		}
	}
	for _, c := range []struct {
		kind string
		rows [][]constant.Value
	}{{"exactReference", exact}, {"exactRepository", repository}} {
		for _, r := range c.rows {
			a, b, want := str(r[0]), str(r[1]), constant.BoolVal(r[2])
			for _, p := range [][2]string{{a, b}, {b, a}} {
				name := fmt.Sprintf("%s(policy %q, signed %q)", c.kind, p[0], p[1])
				rule, valid := withReference(c.kind)(p[0])
				got := valid && rule.matches(identity{repo: "never.example/image", tag: "x"}, p[1])
				checkVector(t, name, got, want)
			}
		}
	}

	// remapIdentity: which references a prefix names, what they become,
	// and the whole match.
	for _, r := range table(t, tables, "TestPRMRemapIdentityRefMatchesPrefix#0", "ssb") {
		ref, prefix, want := str(r[0]), str(r[1]), constant.BoolVal(r[2])
		img, err := parseIdentity(ref)
		if err != nil {
			t.Fatalf("remapIdentity prefix case %q: %v", ref, err)
		}
		rule := identityRule{kind: "remapIdentity", prefix: prefix, signedTo: "docker.io/library/signed-prefix"}
		checkVector(t, fmt.Sprintf("remapIdentity.prefixMatches(%q, prefix %q)", ref, prefix), rule.prefixMatches(img), want)
	}
	for _, r := range table(t, tables, "TestPRMRemapIdentityRemapReferencePrefix#0", "ssss") {
		prefix, signedPrefix, ref, want := str(r[0]), str(r[1]), str(r[2]), str(r[3])
		img, err := parseIdentity(ref)
		if err != nil {
			t.Fatalf("remapIdentity rewrite case %q: %v", ref, err)
		}
		got, ok := identityRule{kind: "remapIdentity", prefix: prefix, signedTo: signedPrefix}.remap(img)
		gotS := got.String()
		if !ok {
			gotS = ""
		}
		name := fmt.Sprintf("remapIdentity.remap(%q, %q → %q)", ref, prefix, signedPrefix)
		if gotS != want {
			t.Errorf("%s = %q, containers/image says %q", name, gotS, want)
		}
	}
	for _, r := range table(t, tables, "TestPRMRemapIdentityMatchesDockerReference#0", "ssssb") {
		rule := identityRule{kind: "remapIdentity", prefix: str(r[0]), signedTo: str(r[1])}
		name := fmt.Sprintf("remapIdentity(%q → %q, image %q, signed %q)", str(r[0]), str(r[1]), str(r[2]), str(r[3]))
		got, ok := matchOf(rule, str(r[2]), str(r[3]))
		if !ok {
			t.Fatalf("%s: image reference does not parse", name)
		}
		checkVector(t, name, got, constant.BoolVal(r[4]))
	}
	// remapIdentity with a prefix that rewrites nothing is
	// matchRepoDigestOrExact; one that rewrites the image's host back to
	// the signed one is too.
	remapLikeDigestOrExact := func(imageRef, sigRef string, want bool) {
		img, err := parseIdentity(imageRef)
		if err != nil {
			return
		}
		none := identityRule{kind: "remapIdentity", prefix: "never-causes-a-rewrite.example", signedTo: "never-causes-a-rewrite.example"}
		checkVector(t, fmt.Sprintf("remapIdentity(no rewrite, image %q, signed %q)", imageRef, sigRef), none.matches(img, sigRef), want)
		host, _, _ := strings.Cut(img.repo, "/")
		moved := img
		moved.repo = nextLetter(host) + strings.TrimPrefix(img.repo, host)
		back := identityRule{kind: "remapIdentity", prefix: nextLetter(host), signedTo: host}
		checkVector(t, fmt.Sprintf("remapIdentity(%s → %s, image %q, signed %q)", nextLetter(host), host, moved, sigRef), back.matches(moved, sigRef), want)
	}
	for _, g := range []struct {
		rows      [][]constant.Value
		only      func(bool) bool
		symmetric bool
	}{{exact, accepted, true}, {repository, refused, true}, {digestOrExact, all, false}} {
		for _, r := range g.rows {
			if want := constant.BoolVal(r[2]); g.only(want) {
				remapLikeDigestOrExact(str(r[0]), str(r[1]), want)
				if g.symmetric {
					remapLikeDigestOrExact(str(r[1]), str(r[0]), want)
				}
			}
		}
	}
}

// nextLetter changes a host name's first letter, as upstream's test does
// to make a host that rewrites to it.
func nextLetter(s string) string {
	c := s[0]
	if c == 'z' {
		c = 'a'
	} else {
		c++
	}
	return string(c) + s[1:]
}

// The scope of a policy that judges an image: the precedence cases of
// containers/image's evaluator, against a policy with every scope they
// name (the docker transport's; the others judge no pull of minicri's).
func TestUpstreamScopePrecedence(t *testing.T) {
	dir := upstreamSignatureDir(t)
	tables := upstreamTables(t, filepath.Join(dir, "policy_eval_test.go"))
	scopes := table(t, tables, "TestPolicyContextRequirementsForImageRef#0", "ss")
	cases := table(t, tables, "TestPolicyContextRequirementsForImageRef#1", "ssss")

	docker := map[string]any{}
	for _, s := range scopes {
		if str(s[0]) == "docker" {
			docker[str(s[1])] = []any{map[string]string{"type": "insecureAcceptAnything"}}
		}
	}
	data, err := json.Marshal(map[string]any{"default": []any{map[string]string{"type": "reject"}}, "transports": map[string]any{"docker": docker}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePolicy("upstream", data)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cases {
		inTransport, input, matchedTransport, matched := str(c[0]), str(c[1]), str(c[2]), str(c[3])
		if inTransport != "docker" {
			continue
		}
		n++
		img, err := parseIdentity(input)
		if err != nil {
			t.Fatalf("%q: %v", input, err)
		}
		want := "default"
		if matchedTransport != "" {
			want = fmt.Sprintf("transports.%s.%q", matchedTransport, matched)
		}
		if _, got := p.requirementsFor(img); got != want {
			t.Errorf("scope of %q = %s, containers/image says %s", input, got, want)
		}
	}
	if n == 0 {
		t.Fatal("no docker precedence case in the upstream table")
	}
}

// containers/image's policy fixture: every docker scope it has is read as
// containers/image reads it, except the requirements minicri refuses to
// check (GPG signedBy, signedBaseLayer), which refuse the whole file, and
// keys that do not parse, which minicri refuses at load, not at the pull.
func TestUpstreamPolicyFixture(t *testing.T) {
	dir := upstreamSignatureDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "fixtures", "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePolicy("policy.json", data); err == nil || !strings.Contains(err.Error(), "not supported by minicri") {
		t.Errorf("the fixture with GPG requirements: %v, want a refusal naming what minicri does not check", err)
	}
	// Without the scopes minicri refuses, and with a real key where the
	// fixture has a placeholder, it loads, and each scope judges as its
	// requirements say.
	var pj map[string]any
	if err := json.Unmarshal(data, &pj); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "fixtures", "cosign.pub")
	docker := pj["transports"].(map[string]any)["docker"].(map[string]any)
	kept := 0
	for scope, reqs := range docker {
		drop := false
		for _, r := range reqs.([]any) {
			r := r.(map[string]any)
			switch r["type"] {
			case "signedBy", "signedBaseLayer":
				drop = true
			case "sigstoreSigned":
				if _, ok := r["keyData"]; ok {
					delete(r, "keyData")
				}
				r["keyPath"] = key
			}
		}
		if drop {
			delete(docker, scope)
		} else {
			kept++
		}
	}
	if kept == 0 {
		t.Fatal("no scope of the fixture is one minicri checks")
	}
	trimmed, _ := json.Marshal(pj)
	p, err := parsePolicy("policy.json", trimmed)
	if err != nil {
		t.Fatalf("the fixture's scopes that minicri checks: %v", err)
	}
	for _, c := range []struct{ image, scope, kind string }{
		{"example.com/playground/app:1", `transports.docker."example.com/playground"`, "insecureAcceptAnything"},
		{"example.com/sigstore/key-path-example/app:1", `transports.docker."example.com/sigstore/key-path-example"`, "sigstoreSigned"},
		{"example.com/sigstore/key-data-example:1", `transports.docker."example.com/sigstore/key-data-example"`, "sigstoreSigned"},
		{"docker.io/library/busybox:latest", "default", "reject"},
	} {
		img, err := parseIdentity(c.image)
		if err != nil {
			t.Fatal(err)
		}
		reqs, scope := p.requirementsFor(img)
		if scope != c.scope || len(reqs) != 1 || reqs[0].kind != c.kind {
			t.Errorf("%s: scope %s, %d requirements; want %s with one %s", c.image, scope, len(reqs), c.scope, c.kind)
		}
	}
}

// upstreamFixtureLinks are the image fixtures' symbolic links, as the
// repository has them: a module's zip leaves links out.
var upstreamFixtureLinks = map[string]string{
	"dir-img-cosign-mixed/manifest.json":            "dir-img-cosign-valid/manifest.json",
	"dir-img-cosign-mixed/signature-1":              "unknown-cosign-key.signature",
	"dir-img-cosign-mixed/signature-2":              "dir-img-cosign-valid/signature-1",
	"dir-img-cosign-modified-manifest/signature-1":  "dir-img-cosign-valid/signature-1",
	"dir-img-cosign-other-attachment/manifest.json": "dir-img-cosign-valid/manifest.json",
	"dir-img-cosign-valid-2/manifest.json":          "dir-img-cosign-valid/manifest.json",
	"dir-img-cosign-valid-2/signature-1":            "dir-img-cosign-valid/signature-1",
	"dir-img-unsigned/manifest.json":                "dir-img-valid/manifest.json",
	"dir-img-valid/manifest.json":                   "image.manifest.json",
}

// upstreamFixture reads fixtures/name, through the links a module leaves out.
func upstreamFixture(fixtures, name string) ([]byte, error) {
	if target, ok := upstreamFixtureLinks[name]; ok {
		return upstreamFixture(fixtures, target)
	}
	return os.ReadFile(filepath.Join(fixtures, name))
}

// upstreamSignatures reads the cosign signatures of one of containers/image's
// image fixture dirs (its internal "sigstore-json" signature files; other
// files are GPG signatures, which minicri never sees) and the digest of its
// manifest. As minicri's fetcher keeps only cosign's payload layers, a
// sigstore attachment of another type is left out.
func upstreamSignatures(t *testing.T, fixtures, dir string) ([]cosignSignature, string) {
	t.Helper()
	manifest, err := upstreamFixture(fixtures, dir+"/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(manifest)
	var sigs []cosignSignature
	for i := 1; ; i++ {
		data, err := upstreamFixture(fixtures, fmt.Sprintf("%s/signature-%d", dir, i))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, ok := bytes.CutPrefix(data, []byte("\x00sigstore-json\n"))
		if !ok {
			continue
		}
		var s struct {
			MIMEType    string            `json:"mimeType"`
			Payload     []byte            `json:"payload"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("%s signature-%d: %v", dir, i, err)
		}
		if s.MIMEType != string(cosignPayloadType) {
			continue
		}
		sigs = append(sigs, cosignSignature{payload: s.Payload, signature: s.Annotations["dev.cosignproject.cosign/signature"], where: fmt.Sprintf("signature-%d", i)})
	}
	return sigs, "sha256:" + hex.EncodeToString(sum[:])
}

// containers/image's cosign-signed fixtures, judged by a sigstoreSigned
// requirement as its isRunningImageAllowed cases judge them.
func TestUpstreamSigstoreFixtures(t *testing.T) {
	dir := upstreamSignatureDir(t)
	fixtures := filepath.Join(dir, "fixtures")
	keyOf := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const signedRepo = "192.168.64.2:5000/cosign-signed-single-sample"
	for _, c := range []struct {
		fixture, image, identity string
		keys                     []string
		allowed                  bool
	}{
		{"dir-img-cosign-valid", signedRepo, "matchRepository", []string{"cosign.pub"}, true},
		{"dir-img-cosign-valid", signedRepo, "matchRepository", []string{"cosign2.pub"}, false},
		{"dir-img-cosign-valid", signedRepo, "matchRepository", []string{"cosign2.pub", "cosign.pub"}, true},
		{"dir-img-cosign-valid", "testing/manifest:notlatest", "matchRepository", []string{"cosign.pub"}, false},
		{"dir-img-cosign-valid", signedRepo, "matchExact", []string{"cosign.pub"}, false},
		{"dir-img-cosign-valid-2", signedRepo, "matchRepository", []string{"cosign.pub"}, true},
		{"dir-img-cosign-valid-2", "this/does-not:match", "matchRepository", []string{"cosign.pub"}, false},
		{"dir-img-cosign-mixed", signedRepo, "matchRepository", []string{"cosign.pub"}, true},
		{"dir-img-cosign-valid-with-tag", "192.168.64.2:5000/skopeo-signed:tag", "matchExact", []string{"cosign.pub"}, true},
		{"dir-img-cosign-valid-with-tag", "192.168.64.2:5000/skopeo-signed:othertag", "matchExact", []string{"cosign.pub"}, false},
		{"dir-img-cosign-other-attachment", "testing/manifest:latest", "matchRepository", []string{"cosign.pub"}, false},
		{"dir-img-cosign-modified-manifest", signedRepo, "matchRepository", []string{"cosign.pub"}, false},
		{"dir-img-valid", "testing/manifest:latest", "matchRepository", []string{"cosign.pub"}, false}, // GPG signatures only
		{"dir-img-unsigned", "testing/manifest:latest", "matchRepository", []string{"cosign.pub"}, false},
	} {
		name := fmt.Sprintf("%s as %s, %s, keys %v", c.fixture, c.image, c.identity, c.keys)
		sigs, digest := upstreamSignatures(t, fixtures, c.fixture)
		req := requirement{kind: "sigstoreSigned", identity: identityRule{kind: c.identity}}
		for _, k := range c.keys {
			key, err := parsePublicKey(keyOf(k))
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			req.keys = append(req.keys, key)
		}
		img, err := parseIdentity(c.image)
		if err != nil {
			t.Fatal(err)
		}
		none := func() ([]cosignSignature, error) { return nil, nil }
		err = judge([]requirement{req}, img, digest, signatureSource{tagged: func() ([]cosignSignature, error) { return sigs, nil }, referred: none})
		if (err == nil) != c.allowed {
			t.Errorf("%s: judged %v, containers/image allows: %v", name, err, c.allowed)
		}
	}
}
