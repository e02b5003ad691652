package network

import (
	"errors"
	"fmt"
	"strings"
	"text/template/parse"
)

// The conf_template is parsed by text/template's own parser and run by the
// small evaluator below, not by text/template: text/template finds methods
// by name at run time (reflect's MethodByName), which makes the linker keep
// every exported method of every type the daemon links, 3.6 MB of its
// binary (docs/performance.md). The evaluator knows only the values a
// template is given (TemplateValues: strings and lists of strings) and the
// builtins a CNI config needs; its output is text/template's byte for byte
// (cni_template_eval_test.go runs both). Anything else is an error that
// names the construct.

// errUnsupported marks a construct text/template would run but minicri's
// evaluator does not.
var errUnsupported = errors.New("not supported by minicri's conf_template (docs/networking.md)")

// templateFuncs are text/template's builtins, all of them, so that the
// parser accepts and refuses the same names; the evaluator runs those in
// evalBuiltin and refuses the rest with errUnsupported.
var templateFuncs = map[string]any{
	"and": true, "call": true, "html": true, "index": true, "slice": true,
	"js": true, "len": true, "not": true, "or": true, "print": true,
	"printf": true, "println": true, "urlquery": true,
	"eq": true, "ge": true, "gt": true, "le": true, "lt": true, "ne": true,
}

// A template's run is bounded, where text/template's is not: the kubelet
// calls UpdateRuntimeConfig at every node status sync, and a template that
// ranges over a huge integer would pin a core, or fill memory, each time.
// A CNI config list is a few KB.
const (
	maxTemplateOutput     = 1 << 20
	maxTemplateIterations = 1 << 20
)

// errTooBig marks a run stopped by those bounds.
var errTooBig = errors.New("the template runs too long")

// errBreak and errContinue carry {{break}} and {{continue}} to their range.
var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// missing is a pipeline's final value before its first command: no value,
// as opposed to nil.
type missingValue struct{}

var missing any = missingValue{}

type templateVar struct {
	name  string
	value any
}

// templateState is one execution: the tree (for error positions), the
// output and the variable stack, $ at the bottom.
type templateState struct {
	tree       *parse.Tree
	out        *strings.Builder
	vars       []templateVar
	iterations int // of all ranges, against maxTemplateIterations
}

// executeTemplate parses text as text/template does with the template name
// name and runs it on values, as Execute with missingkey=error would.
func executeTemplate(name, text string, values TemplateValues) (string, error) {
	trees, err := parse.Parse(name, text, "", "", templateFuncs)
	if err != nil {
		return "", err
	}
	// Templates the file defines are parsed (and their errors reported as
	// text/template would) but only reachable by {{template}}, refused.
	s := &templateState{tree: trees[name], out: &strings.Builder{}, vars: []templateVar{{"$", values}}}
	if err := s.walk(values, s.tree.Root); err != nil {
		return "", err
	}
	return s.out.String(), nil
}

func (s *templateState) errorf(node parse.Node, format string, args ...any) error {
	location, context := s.tree.ErrorContext(node)
	return fmt.Errorf("template: %s: executing at <%s>: %s", location, context, fmt.Sprintf(format, args...))
}

func (s *templateState) unsupported(node parse.Node, what string) error {
	location, context := s.tree.ErrorContext(node)
	return fmt.Errorf("template: %s: executing at <%s>: %s: %w", location, context, what, errUnsupported)
}

func (s *templateState) push(name string, value any) {
	s.vars = append(s.vars, templateVar{name, value})
}
func (s *templateState) mark() int    { return len(s.vars) }
func (s *templateState) pop(mark int) { s.vars = s.vars[:mark] }

// setTopVar sets the n-th variable from the top of the stack (1 is the top).
func (s *templateState) setTopVar(n int, value any) { s.vars[len(s.vars)-n].value = value }

func (s *templateState) setVar(name string, value any) error {
	for i := len(s.vars) - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			s.vars[i].value = value
			return nil
		}
	}
	return fmt.Errorf("undefined variable: %s", name)
}

func (s *templateState) varValue(name string) (any, error) {
	for i := len(s.vars) - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			return s.vars[i].value, nil
		}
	}
	return nil, fmt.Errorf("undefined variable: %s", name)
}

func (s *templateState) walk(dot any, node parse.Node) error {
	switch n := node.(type) {
	case *parse.ActionNode:
		v, err := s.evalPipeline(dot, n.Pipe)
		if err != nil || len(n.Pipe.Decl) > 0 {
			return err
		}
		s.print(v)
		return s.checkOutput(n)
	case *parse.BreakNode:
		return errBreak
	case *parse.ContinueNode:
		return errContinue
	case *parse.CommentNode:
		return nil
	case *parse.IfNode:
		return s.walkIfOrWith(dot, n.Pipe, n.List, n.ElseList, false)
	case *parse.WithNode:
		return s.walkIfOrWith(dot, n.Pipe, n.List, n.ElseList, true)
	case *parse.ListNode:
		for _, c := range n.Nodes {
			if err := s.walk(dot, c); err != nil {
				return err
			}
		}
		return nil
	case *parse.RangeNode:
		return s.walkRange(dot, n)
	case *parse.TextNode:
		s.out.Write(n.Text)
		return s.checkOutput(n)
	case *parse.TemplateNode:
		return s.unsupported(n, "{{template}}")
	}
	return s.unsupported(node, fmt.Sprintf("node %s", node))
}

func (s *templateState) checkOutput(node parse.Node) error {
	if s.out.Len() > maxTemplateOutput {
		return fmt.Errorf("%w: %w", s.errorf(node, "output over %d bytes", maxTemplateOutput), errTooBig)
	}
	return nil
}

// print writes an action's value as text/template does: fmt's default
// format, unescaped.
func (s *templateState) print(v any) {
	if v == nil {
		s.out.WriteString("<no value>")
		return
	}
	fmt.Fprint(s.out, v)
}

func (s *templateState) walkIfOrWith(dot any, pipe *parse.PipeNode, list, elseList *parse.ListNode, with bool) error {
	defer s.pop(s.mark())
	v, err := s.evalPipeline(dot, pipe)
	if err != nil {
		return err
	}
	truth, ok := isTrue(v)
	if !ok {
		return s.errorf(pipe, "if/with can't use %v", v)
	}
	switch {
	case truth && with:
		return s.walk(v, list)
	case truth:
		return s.walk(dot, list)
	case elseList != nil:
		return s.walk(dot, elseList)
	}
	return nil
}

func (s *templateState) walkRange(dot any, r *parse.RangeNode) error {
	defer s.pop(s.mark())
	v, err := s.evalPipeline(dot, r.Pipe)
	if err != nil {
		return err
	}
	mark := s.mark()
	decl := r.Pipe.Decl
	// As text/template: with one variable it gets the element; with two,
	// the index and the element.
	iteration := func(index, elem any) error {
		defer s.pop(mark)
		if len(decl) > 0 {
			if r.Pipe.IsAssign {
				first := elem
				if len(decl) > 1 {
					first = index
				}
				if err := s.setVar(decl[0].Ident[0], first); err != nil {
					return s.errorf(r, "%v", err)
				}
			} else {
				s.setTopVar(1, elem)
			}
		}
		if len(decl) > 1 {
			if r.Pipe.IsAssign {
				if err := s.setVar(decl[1].Ident[0], elem); err != nil {
					return s.errorf(r, "%v", err)
				}
			} else {
				s.setTopVar(2, index)
			}
		}
		if err := s.walk(elem, r.List); err != nil && err != errContinue {
			return err
		}
		return nil
	}
	// A list gives index and element; an integer n (a byte of a string
	// too) gives 0..n-1 of its type, as the only value; nil, nothing.
	var n int
	var elem func(i int) any
	_, isList := v.([]string)
	switch v := v.(type) {
	case []string:
		n, elem = len(v), func(i int) any { return v[i] }
	case int:
		n, elem = v, func(i int) any { return i }
	case uint8:
		n, elem = int(v), func(i int) any { return uint8(i) }
	case nil:
	default:
		return s.errorf(r, "range can't iterate over %v", v)
	}
	if v != nil && !isList && len(decl) > 1 {
		return s.errorf(r, "can't use %v to iterate over more than one variable", v)
	}
	for i := 0; i < n; i++ {
		if s.iterations++; s.iterations > maxTemplateIterations {
			return fmt.Errorf("%w: %w", s.errorf(r, "over %d range iterations", maxTemplateIterations), errTooBig)
		}
		var index any
		if isList {
			index = i
		}
		if err := iteration(index, elem(i)); err == errBreak {
			break
		} else if err != nil {
			return err
		}
	}
	if n <= 0 && r.ElseList != nil {
		return s.walk(dot, r.ElseList)
	}
	return nil
}

func (s *templateState) evalPipeline(dot any, pipe *parse.PipeNode) (any, error) {
	if pipe == nil {
		return nil, nil
	}
	v := missing
	for _, cmd := range pipe.Cmds {
		var err error
		if v, err = s.evalCommand(dot, cmd, v); err != nil {
			return nil, err
		}
	}
	for _, d := range pipe.Decl {
		if pipe.IsAssign {
			if err := s.setVar(d.Ident[0], v); err != nil {
				return nil, s.errorf(d, "%v", err)
			}
		} else {
			s.push(d.Ident[0], v)
		}
	}
	return v, nil
}

func (s *templateState) evalCommand(dot any, cmd *parse.CommandNode, final any) (any, error) {
	first := cmd.Args[0]
	switch n := first.(type) {
	case *parse.FieldNode:
		return s.evalFields(n, dot, n.Ident, cmd.Args, final)
	case *parse.ChainNode:
		v, err := s.evalArg(dot, n.Node)
		if err != nil {
			return nil, err
		}
		return s.evalFields(n, v, n.Field, cmd.Args, final)
	case *parse.IdentifierNode:
		return s.evalBuiltin(dot, n, cmd, cmd.Args[1:], final)
	case *parse.VariableNode:
		v, err := s.varValue(n.Ident[0])
		if err != nil {
			return nil, s.errorf(n, "%v", err)
		}
		if len(n.Ident) == 1 {
			return v, s.notAFunction(n, cmd.Args, final)
		}
		return s.evalFields(n, v, n.Ident[1:], cmd.Args, final)
	case *parse.NilNode:
		return nil, s.errorf(n, "nil is not a command")
	}
	if err := s.notAFunction(first, cmd.Args, final); err != nil {
		return nil, err
	}
	return s.evalArg(dot, first)
}

func (s *templateState) notAFunction(node parse.Node, args []parse.Node, final any) error {
	if len(args) > 1 || final != missing {
		return s.errorf(node, "can't give argument to non-function %s", args[0])
	}
	return nil
}

// evalFields follows .A.B from v; only TemplateValues has fields, and no
// value has methods, so nothing can take arguments.
func (s *templateState) evalFields(node parse.Node, v any, idents []string, args []parse.Node, final any) (any, error) {
	for i, name := range idents {
		tv, ok := v.(TemplateValues)
		if !ok {
			if v == nil {
				return nil, s.errorf(node, "nil pointer evaluating %s.%s", "interface {}", name)
			}
			return nil, s.errorf(node, "can't evaluate field %s in type %T", name, v)
		}
		switch name {
		case "PodCIDR":
			v = tv.PodCIDR
		case "PodCIDRRanges":
			v = tv.PodCIDRRanges
		case "Routes":
			v = tv.Routes
		default:
			return nil, s.errorf(node, "can't evaluate field %s in type %T", name, tv)
		}
		if i == len(idents)-1 && (len(args) > 1 || final != missing) {
			return nil, s.errorf(node, "%s has arguments but cannot be invoked as function", name)
		}
	}
	return v, nil
}

// evalArg evaluates an argument of a function or the start of a chain.
func (s *templateState) evalArg(dot any, node parse.Node) (any, error) {
	switch n := node.(type) {
	case *parse.DotNode:
		return dot, nil
	case *parse.FieldNode:
		return s.evalFields(n, dot, n.Ident, nil, missing)
	case *parse.VariableNode:
		v, err := s.varValue(n.Ident[0])
		if err != nil {
			return nil, s.errorf(n, "%v", err)
		}
		return s.evalFields(n, v, n.Ident[1:], nil, missing)
	case *parse.PipeNode:
		return s.evalPipeline(dot, n)
	case *parse.IdentifierNode:
		return s.evalBuiltin(dot, n, n, nil, missing)
	case *parse.ChainNode:
		v, err := s.evalArg(dot, n.Node)
		if err != nil {
			return nil, err
		}
		return s.evalFields(n, v, n.Field, nil, missing)
	case *parse.BoolNode:
		return n.True, nil
	case *parse.NumberNode:
		return s.idealConstant(n)
	case *parse.StringNode:
		return n.Text, nil
	case *parse.NilNode:
		return nil, nil
	}
	return nil, s.unsupported(node, fmt.Sprintf("argument %s", node))
}

// idealConstant types a number literal as text/template does: complex,
// float if written as one, else int.
func (s *templateState) idealConstant(n *parse.NumberNode) (any, error) {
	isHexInt := len(n.Text) > 2 && n.Text[0] == '0' && (n.Text[1] == 'x' || n.Text[1] == 'X') && !strings.ContainsAny(n.Text, "pP")
	isRune := n.Text != "" && n.Text[0] == '\''
	switch {
	case n.IsComplex:
		return n.Complex128, nil
	case n.IsFloat && !isHexInt && !isRune && strings.ContainsAny(n.Text, ".eEpP"):
		return n.Float64, nil
	case n.IsInt:
		if int64(int(n.Int64)) != n.Int64 {
			return nil, s.errorf(n, "%s overflows int", n.Text)
		}
		return int(n.Int64), nil
	case n.IsUint:
		return nil, s.errorf(n, "%s overflows int", n.Text)
	}
	return nil, nil
}

// evalBuiltin calls a builtin with args (the command's words after its
// name) and, if not missing, final (the value piped in) last.
func (s *templateState) evalBuiltin(dot any, name *parse.IdentifierNode, node parse.Node, args []parse.Node, final any) (any, error) {
	nargs := len(args)
	if final != missing {
		nargs++
	}
	// arg evaluates the i-th argument; and and or evaluate theirs lazily.
	arg := func(i int) (any, error) {
		if i == len(args) {
			return final, nil
		}
		return s.evalArg(dot, args[i])
	}
	want := func(n int, atLeast bool) error {
		if nargs == n || atLeast && nargs > n {
			return nil
		}
		if atLeast {
			return s.errorf(node, "wrong number of args for %s: want at least %d got %d", name.Ident, n, nargs)
		}
		return s.errorf(node, "wrong number of args for %s: want %d got %d", name.Ident, n, nargs)
	}
	all := func(n int, atLeast bool) ([]any, error) {
		if err := want(n, atLeast); err != nil {
			return nil, err
		}
		vs := make([]any, nargs)
		for i := range vs {
			v, err := arg(i)
			if err != nil {
				return nil, err
			}
			vs[i] = v
		}
		return vs, nil
	}
	only := func() (any, error) {
		if err := want(1, false); err != nil {
			return nil, err
		}
		return arg(0)
	}
	switch name.Ident {
	case "and", "or":
		if err := want(1, true); err != nil {
			return nil, err
		}
		var v any
		for i := 0; i < nargs; i++ {
			var err error
			if v, err = arg(i); err != nil {
				return nil, err
			}
			if truth, _ := isTrue(v); truth == (name.Ident == "or") {
				return v, nil
			}
		}
		return v, nil
	case "not":
		v, err := only()
		if err != nil {
			return nil, err
		}
		truth, _ := isTrue(v)
		return !truth, nil
	case "len":
		v, err := only()
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case string:
			return len(v), nil
		case []string:
			return len(v), nil
		case nil:
			return nil, s.errorf(node, "error calling len: len of nil pointer")
		}
		return nil, s.errorf(node, "error calling len: len of type %T", v)
	case "index":
		vs, err := all(1, true)
		if err != nil {
			return nil, err
		}
		return s.index(node, vs[0], vs[1:])
	case "eq", "ne":
		n, atLeast := 1, true
		if name.Ident == "ne" {
			n, atLeast = 2, false
		}
		vs, err := all(n, atLeast)
		if err != nil {
			return nil, err
		}
		if len(vs) == 1 {
			return nil, s.errorf(node, "error calling %s: missing argument for comparison", name.Ident)
		}
		equal, err := eq(vs[0], vs[1:])
		if err != nil {
			return nil, s.errorf(node, "error calling %s: %v", name.Ident, err)
		}
		return equal == (name.Ident == "eq"), nil
	case "lt", "le", "gt", "ge":
		vs, err := all(2, false)
		if err != nil {
			return nil, err
		}
		// gt is not le, ge is not lt.
		orEqual := name.Ident == "le" || name.Ident == "gt"
		less, err := lt(vs[0], vs[1])
		if err == nil && orEqual && !less {
			less, err = eq(vs[0], vs[1:])
		}
		if err != nil {
			return nil, s.errorf(node, "error calling %s: %v", name.Ident, err)
		}
		return less == (name.Ident[0] == 'l'), nil
	case "print", "println":
		vs, err := all(0, true)
		if err != nil {
			return nil, err
		}
		if name.Ident == "print" {
			return fmt.Sprint(vs...), nil
		}
		return fmt.Sprintln(vs...), nil
	case "printf":
		vs, err := all(1, true)
		if err != nil {
			return nil, err
		}
		format, ok := vs[0].(string)
		if !ok {
			return nil, s.errorf(node, "wrong type for value; expected string; got %T", vs[0])
		}
		return fmt.Sprintf(format, vs[1:]...), nil
	}
	return nil, s.unsupported(node, fmt.Sprintf("function %q", name.Ident))
}

func (s *templateState) index(node parse.Node, item any, indexes []any) (any, error) {
	for _, i := range indexes {
		var n int
		switch i := i.(type) {
		case int:
			n = i
		case uint8:
			n = int(i)
		case nil:
			return nil, s.errorf(node, "error calling index: cannot index slice/array with nil")
		default:
			return nil, s.errorf(node, "error calling index: cannot index slice/array with type %T", i)
		}
		switch v := item.(type) {
		case []string:
			if n < 0 || n >= len(v) {
				return nil, s.errorf(node, "error calling index: index out of range: %d", n)
			}
			item = v[n]
		case string:
			if n < 0 || n >= len(v) {
				return nil, s.errorf(node, "error calling index: index out of range: %d", n)
			}
			item = v[n]
		case nil:
			return nil, s.errorf(node, "error calling index: index of untyped nil")
		default:
			return nil, s.errorf(node, "error calling index: can't index item of type %T", v)
		}
	}
	if item == nil {
		return nil, s.errorf(node, "error calling index: index of untyped nil")
	}
	return item, nil
}

// isTrue is text/template's truth: non-zero, non-empty; ok is false for
// what has no truth.
func isTrue(v any) (truth, ok bool) {
	switch v := v.(type) {
	case nil:
		return false, true
	case bool:
		return v, true
	case string:
		return v != "", true
	case []string:
		return len(v) > 0, true
	case int:
		return v != 0, true
	case uint8:
		return v != 0, true
	case float64:
		return v != 0, true
	case complex128:
		return v != 0, true
	case TemplateValues:
		return true, true
	}
	return false, false
}

// eq is text/template's eq over the values a template can hold: basic
// values of one kind compare by value (ints of either sign together), a
// list or the values struct only with nil, other mixes are errors.
func eq(a any, others []any) (bool, error) {
	ka := basicKind(a)
	for _, b := range others {
		kb := basicKind(b)
		truth := false
		switch {
		case ka == "int" && kb == "uint":
			truth = a.(int) >= 0 && a.(int) == int(b.(uint8))
		case ka == "uint" && kb == "int":
			truth = b.(int) >= 0 && int(a.(uint8)) == b.(int)
		case ka != kb:
			if a != nil && b != nil {
				return false, fmt.Errorf("incompatible types for comparison: %T and %T", a, b)
			}
		case ka != "":
			truth = a == b
		case a != nil && b != nil && fmt.Sprintf("%T", a) != fmt.Sprintf("%T", b):
			return false, fmt.Errorf("non-comparable types %T and %T", a, b)
		case isNil(a) || isNil(b):
			truth = isNil(a) == isNil(b)
		default:
			return false, fmt.Errorf("non-comparable type %T", a)
		}
		if truth {
			return true, nil
		}
	}
	return false, nil
}

// lt is text/template's lt: basic values of one kind, ordered; ints of
// either sign together; bools and complex numbers have no order.
func lt(a, b any) (bool, error) {
	ka, kb := basicKind(a), basicKind(b)
	if ka == "" || kb == "" {
		return false, errors.New("invalid type for comparison")
	}
	asInt := func(v any) int {
		if u, ok := v.(uint8); ok {
			return int(u)
		}
		return v.(int)
	}
	switch {
	case (ka == "int" || ka == "uint") && (kb == "int" || kb == "uint"):
		return asInt(a) < asInt(b), nil
	case ka != kb:
		return false, fmt.Errorf("incompatible types for comparison: %T and %T", a, b)
	case ka == "float":
		return a.(float64) < b.(float64), nil
	case ka == "string":
		return a.(string) < b.(string), nil
	}
	return false, errors.New("invalid type for comparison")
}

// basicKind is the kind eq compares by value, "" for the rest.
func basicKind(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int:
		return "int"
	case uint8:
		return "uint"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case string:
		return "string"
	}
	return ""
}

func isNil(v any) bool {
	l, isList := v.([]string)
	return v == nil || isList && l == nil
}
