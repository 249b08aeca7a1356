package apicheck

import (
	"bytes"
	"go/ast"
	"go/printer"
	"go/token"
	"strings"
)

// declLines renders the exported parts of one top-level declaration.
func declLines(decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		return funcLines(d)
	case *ast.GenDecl:
		switch d.Tok {
		case token.CONST:
			return constLines(d)
		case token.VAR:
			return varLines(d)
		case token.TYPE:
			var lines []string
			for _, s := range d.Specs {
				lines = append(lines, typeLines(s.(*ast.TypeSpec))...)
			}
			return lines
		}
	}
	return nil
}

func funcLines(d *ast.FuncDecl) []string {
	if !d.Name.IsExported() {
		return nil
	}
	if d.Recv == nil {
		return []string{"func " + d.Name.Name + typeParams(d.Type.TypeParams) + signature(d.Type)}
	}
	recv := d.Recv.List[0].Type
	if !ast.IsExported(baseTypeName(recv)) {
		return nil
	}
	return []string{"method (" + typeString(recv) + ") " + d.Name.Name + signature(d.Type)}
}

// baseTypeName is the name of a receiver's type: T of T, *T, T[P], *T[P].
func baseTypeName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// constLines renders a const declaration. A spec without a type or values
// repeats the previous spec's (iota groups). A typed constant is rendered
// with its type; an untyped one with the kind of its literal ("untyped
// string"), so that a new value of, say, Version is no API change; any
// other untyped constant with its expression.
func constLines(d *ast.GenDecl) []string {
	var lines []string
	var typ ast.Expr
	var values []ast.Expr
	for _, s := range d.Specs {
		spec := s.(*ast.ValueSpec)
		if spec.Type != nil || len(spec.Values) > 0 {
			typ, values = spec.Type, spec.Values
		}
		for i, name := range spec.Names {
			if !name.IsExported() {
				continue
			}
			switch {
			case typ != nil:
				lines = append(lines, "const "+name.Name+" "+typeString(typ))
			case i < len(values):
				lines = append(lines, "const "+name.Name+untypedConst(values[i]))
			default:
				lines = append(lines, "const "+name.Name)
			}
		}
	}
	return lines
}

// untypedConst renders an untyped constant's value: the kind of an
// expression made of literals alone (" untyped int" for 1 << 20), else the
// expression, since its type comes from an operand that the source alone
// cannot resolve (10 * time.Second is a time.Duration).
func untypedConst(v ast.Expr) string {
	if kind := literalKind(v); kind != "" {
		return " untyped " + kind
	}
	return " = " + exprString(v)
}

// literalKind is the kind of an expression of literals ("string", "int",
// "float", "rune", "complex"), or "" when it names anything.
func literalKind(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		return map[token.Token]string{token.STRING: "string", token.INT: "int", token.FLOAT: "float", token.CHAR: "rune", token.IMAG: "complex"}[x.Kind]
	case *ast.ParenExpr:
		return literalKind(x.X)
	case *ast.UnaryExpr:
		return literalKind(x.X)
	case *ast.BinaryExpr:
		l, r := literalKind(x.X), literalKind(x.Y)
		if l == "" || r == "" {
			return ""
		}
		if x.Op == token.SHL || x.Op == token.SHR {
			return l
		}
		// The kinds rank as Go's untyped constants do: int < rune < float < complex.
		rank := map[string]int{"int": 0, "rune": 1, "float": 2, "complex": 3, "string": 4}
		if rank[r] > rank[l] {
			return r
		}
		return l
	}
	return ""
}

// varLines renders a var declaration: its type when written, else what
// the value says of it (an errors.New or fmt.Errorf is an error, a
// composite literal or a function literal is of its type, a basic literal
// of its default type), else the value with any call's arguments left out
// (an error's text is no API).
func varLines(d *ast.GenDecl) []string {
	var lines []string
	for _, s := range d.Specs {
		spec := s.(*ast.ValueSpec)
		for i, name := range spec.Names {
			if !name.IsExported() {
				continue
			}
			switch {
			case spec.Type != nil:
				lines = append(lines, "var "+name.Name+" "+typeString(spec.Type))
			case len(spec.Values) == len(spec.Names):
				lines = append(lines, "var "+name.Name+varValue(spec.Values[i]))
			default:
				// var a, b = f(): one call, several values.
				lines = append(lines, "var "+name.Name+" = "+callString(spec.Values[0]))
			}
		}
	}
	return lines
}

func varValue(v ast.Expr) string {
	switch x := v.(type) {
	case *ast.CallExpr:
		switch exprString(x.Fun) {
		case "errors.New", "fmt.Errorf":
			return " error"
		}
	case *ast.CompositeLit:
		if x.Type != nil {
			return " " + typeString(x.Type)
		}
	case *ast.FuncLit:
		return " " + typeString(x.Type)
	case *ast.BasicLit:
		// An untyped literal gives the variable its default type.
		return " " + map[token.Token]string{token.STRING: "string", token.INT: "int", token.FLOAT: "float64", token.CHAR: "rune", token.IMAG: "complex128"}[x.Kind]
	case *ast.UnaryExpr:
		if lit, ok := x.X.(*ast.CompositeLit); ok && x.Op == token.AND && lit.Type != nil {
			return " *" + typeString(lit.Type)
		}
	}
	return " = " + callString(v)
}

// callString is v printed, with a call's arguments left out: f(...).
func callString(v ast.Expr) string {
	if c, ok := v.(*ast.CallExpr); ok {
		return exprString(c.Fun) + "(...)"
	}
	return exprString(v)
}

// typeLines renders an exported type: a line for the type, and one for
// each exported field of a struct and each method of an interface.
func typeLines(s *ast.TypeSpec) []string {
	if !s.Name.IsExported() {
		return nil
	}
	head := "type " + s.Name.Name + typeParams(s.TypeParams)
	if s.Assign.IsValid() {
		return []string{head + " = " + typeString(s.Type)}
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		lines := []string{head + " struct"}
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if ast.IsExported(baseTypeName(f.Type)) || isQualified(f.Type) {
					lines = append(lines, head+" struct, embedded "+typeString(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					lines = append(lines, head+" struct, "+n.Name+" "+typeString(f.Type))
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		lines := []string{head + " interface"}
		unexported := false
		for _, f := range t.Methods.List {
			switch {
			case len(f.Names) == 0:
				lines = append(lines, head+" interface, "+embeddedElem(f.Type))
			case f.Names[0].IsExported():
				lines = append(lines, head+" interface, "+f.Names[0].Name+signature(f.Type.(*ast.FuncType)))
			default:
				unexported = true
			}
		}
		if unexported {
			lines = append(lines, head+" interface, unexported methods")
		}
		return lines
	}
	return []string{head + " " + typeString(s.Type)}
}

// isQualified reports whether an embedded field's type is another
// package's (pkg.T or *pkg.T), whose name is exported.
func isQualified(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	_, ok := e.(*ast.SelectorExpr)
	return ok
}

// embeddedElem is an interface's embedded interface ("embedded io.Reader")
// or type-set element ("~int | ~string").
func embeddedElem(e ast.Expr) string {
	switch e.(type) {
	case *ast.Ident, *ast.SelectorExpr, *ast.IndexExpr, *ast.IndexListExpr:
		return "embedded " + typeString(e)
	}
	return typeString(e)
}

// typeParams renders a type parameter list with its names ("[T JobArgs]"),
// which the signature refers to; "" when there is none.
func typeParams(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		names := make([]string, len(f.Names))
		for i, n := range f.Names {
			names[i] = n.Name
		}
		parts = append(parts, strings.Join(names, ", ")+" "+typeString(f.Type))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature renders a function type's parameters and results without
// their names: "(context.Context, string) error".
func signature(ft *ast.FuncType) string {
	s := "(" + strings.Join(fieldTypes(ft.Params), ", ") + ")"
	results := fieldTypes(ft.Results)
	switch len(results) {
	case 0:
		return s
	case 1:
		return s + " " + results[0]
	}
	return s + " (" + strings.Join(results, ", ") + ")"
}

// fieldTypes lists a field list's types, one for each name (a, b int is
// int, int).
func fieldTypes(fl *ast.FieldList) []string {
	if fl == nil {
		return nil
	}
	var types []string
	for _, f := range fl.List {
		t := typeString(f.Type)
		for range max(1, len(f.Names)) {
			types = append(types, t)
		}
	}
	return types
}

// typeString renders a type expression, function types without their
// parameters' names.
func typeString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return typeString(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + typeString(x.X)
	case *ast.ParenExpr:
		return "(" + typeString(x.X) + ")"
	case *ast.ArrayType:
		if x.Len == nil {
			return "[]" + typeString(x.Elt)
		}
		return "[" + exprString(x.Len) + "]" + typeString(x.Elt)
	case *ast.Ellipsis:
		return "..." + typeString(x.Elt)
	case *ast.MapType:
		return "map[" + typeString(x.Key) + "]" + typeString(x.Value)
	case *ast.ChanType:
		switch x.Dir {
		case ast.SEND:
			return "chan<- " + typeString(x.Value)
		case ast.RECV:
			return "<-chan " + typeString(x.Value)
		}
		return "chan " + typeString(x.Value)
	case *ast.FuncType:
		return "func" + signature(x)
	case *ast.IndexExpr:
		return typeString(x.X) + "[" + typeString(x.Index) + "]"
	case *ast.IndexListExpr:
		args := make([]string, len(x.Indices))
		for i, a := range x.Indices {
			args[i] = typeString(a)
		}
		return typeString(x.X) + "[" + strings.Join(args, ", ") + "]"
	case *ast.UnaryExpr:
		return x.Op.String() + typeString(x.X)
	case *ast.BinaryExpr:
		return typeString(x.X) + " " + x.Op.String() + " " + typeString(x.Y)
	case *ast.InterfaceType:
		var elems []string
		for _, f := range x.Methods.List {
			if len(f.Names) == 0 {
				elems = append(elems, typeString(f.Type))
				continue
			}
			elems = append(elems, f.Names[0].Name+signature(f.Type.(*ast.FuncType)))
		}
		if len(elems) == 0 {
			return "interface{}"
		}
		return "interface{ " + strings.Join(elems, "; ") + " }"
	case *ast.StructType:
		var fields []string
		for _, f := range x.Fields.List {
			t := typeString(f.Type)
			if len(f.Names) == 0 {
				fields = append(fields, t)
			}
			for _, n := range f.Names {
				fields = append(fields, n.Name+" "+t)
			}
		}
		if len(fields) == 0 {
			return "struct{}"
		}
		return "struct{ " + strings.Join(fields, "; ") + " }"
	}
	return exprString(e)
}

// exprString prints an expression as gofmt would.
func exprString(e ast.Expr) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, token.NewFileSet(), e); err != nil {
		return "?"
	}
	return b.String()
}
