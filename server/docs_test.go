package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// unimplementedRPCs lists the CRI RPCs that Server does not declare itself:
// the embedded Unimplemented servers answer them.
func unimplementedRPCs(t *testing.T) (unimplemented, all []string) {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, f := range pkgs["server"].Files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Server" {
					declared[fn.Name.Name] = true
				}
			}
		}
	}
	for _, iface := range []reflect.Type{
		reflect.TypeFor[runtime.RuntimeServiceServer](),
		reflect.TypeFor[runtime.ImageServiceServer](),
	} {
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			if !m.IsExported() {
				continue
			}
			all = append(all, m.Name)
			if !declared[m.Name] {
				unimplemented = append(unimplemented, m.Name)
			}
		}
	}
	slices.Sort(unimplemented)
	return unimplemented, all
}

// The README and docs/cri-fields.md list exactly the RPCs that answer
// Unimplemented: the paragraph that says so names each of them and no other.
func TestDocsListTheUnimplementedRPCs(t *testing.T) {
	unimplemented, all := unimplementedRPCs(t)
	if len(unimplemented) == 0 || len(unimplemented) == len(all) {
		t.Fatalf("unimplemented RPCs = %v of %d: the source was not read", unimplemented, len(all))
	}
	word := regexp.MustCompile(`[A-Z][A-Za-z]+`)
	for _, path := range []string{"../README.md", "../docs/cri-fields.md"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var para string
		for _, p := range strings.Split(string(data), "\n\n") {
			if strings.Contains(p, "answer `Unimplemented`") {
				para = p
			}
		}
		if para == "" {
			t.Errorf("%s has no paragraph that lists the RPCs that answer `Unimplemented`", path)
			continue
		}
		var named []string
		for _, w := range word.FindAllString(para, -1) {
			if slices.Contains(all, w) && !slices.Contains(named, w) {
				named = append(named, w)
			}
		}
		slices.Sort(named)
		if !slices.Equal(named, unimplemented) {
			t.Errorf("%s says these RPCs answer Unimplemented: %v; the server leaves these unimplemented: %v", path, named, unimplemented)
		}
	}
}
