// Command gentypes writes the Go client's types.go from the committed OpenRPC document
// (clients/openrpc.json, itself generated from the server's msgspec types by
// `python -m subagentd schema`). Standard library only.
//
//	go generate ./...                      (from clients/go) write types.go
//	go run ./internal/gentypes -check      exit 1 when types.go is stale
//
// The conversion is mechanical, so adding a field to a schema changes no hand-written file:
//
//   - every schema in components.schemas becomes a struct of the same name, its fields named by
//     Go's conventions (agent_id: AgentID, ttlMs: TTLMs, _meta: Meta);
//   - a required, non-null property is a plain value; an optional or nullable one carries
//     `omitempty`, and is a pointer when it is a number or an object (so that 0 or an empty
//     object stays distinguishable from absent);
//   - string, enum and const: string; integer: int64; number: float64; boolean: bool;
//     array: a slice; an object without properties: map[string]any; a value of any type, or of
//     several scalar types: any;
//   - a discriminated union of objects (anyOf of $refs with a discriminator) is one struct
//     holding the fields of them all, named in unionNames;
//   - components.errors become the Code constants.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
)

const refPrefix = "#/components/schemas/"

// unionNames names the merged struct of each discriminated union the document uses (its
// members' names, joined with "|"). A union missing here is decoded as json.RawMessage.
var unionNames = map[string]string{
	"ChildRow|DiagnosticRow": "AgentRow",
}

// pointerStrings are the optional string properties whose empty string differs from absent
// (schema.property): they are *string.
var pointerStrings = map[string]bool{
	"TurnEndParams.output": true,
}

// initialisms are written in capitals inside Go names.
var initialisms = map[string]bool{
	"id": true, "ttl": true, "uri": true, "url": true, "json": true, "rpc": true,
	"mcp": true, "api": true,
}

type schema struct {
	Ref           string             `json:"$ref"`
	Type          json.RawMessage    `json:"type"`
	Properties    map[string]*schema `json:"properties"`
	Required      []string           `json:"required"`
	Items         *schema            `json:"items"`
	AnyOf         []*schema          `json:"anyOf"`
	OneOf         []*schema          `json:"oneOf"`
	Enum          []any              `json:"enum"`
	Const         any                `json:"const"`
	Description   string             `json:"description"`
	Discriminator *struct {
		PropertyName string `json:"propertyName"`
	} `json:"discriminator"`
}

type document struct {
	Info struct {
		Version         string `json:"version"`
		ProtocolVersion int    `json:"x-protocol-version"`
	} `json:"info"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
		Errors  map[string]struct {
			Code int    `json:"code"`
			Data string `json:"data"`
		} `json:"errors"`
	} `json:"components"`
}

// kind is the JSON type of a schema without null; "" when it is not one type.
func (s *schema) types() []string {
	if len(s.Type) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	return many
}

func refName(ref string) string {
	if !strings.HasPrefix(ref, refPrefix) {
		panic(fmt.Sprintf("unsupported $ref %s", ref))
	}
	return strings.TrimPrefix(ref, refPrefix)
}

// goName turns a JSON name into an exported Go identifier.
func goName(name string) string {
	var words []string
	var word []rune
	flush := func() {
		if len(word) > 0 {
			words = append(words, string(word))
			word = nil
		}
	}
	for i, r := range name {
		switch {
		case r == '_' || r == '-' || r == '/' || r == '$':
			flush()
		case unicode.IsUpper(r) && i > 0:
			flush()
			word = append(word, r)
		default:
			word = append(word, r)
		}
	}
	flush()
	var out strings.Builder
	for _, w := range words {
		lower := strings.ToLower(w)
		if initialisms[lower] {
			out.WriteString(strings.ToUpper(lower))
			continue
		}
		if plural := strings.TrimSuffix(lower, "s"); plural != lower && initialisms[plural] {
			out.WriteString(strings.ToUpper(plural) + "s")
			continue
		}
		rs := []rune(w)
		rs[0] = unicode.ToUpper(rs[0])
		out.WriteString(string(rs))
	}
	return out.String()
}

// stripNull returns the schema without its null alternative and whether it had one.
func stripNull(s *schema) (*schema, bool) {
	alts := s.AnyOf
	if alts == nil {
		alts = s.OneOf
	}
	if alts == nil {
		ts := s.types()
		if len(ts) == 2 && (ts[0] == "null" || ts[1] == "null") {
			other := ts[0]
			if other == "null" {
				other = ts[1]
			}
			copied := *s
			copied.Type = json.RawMessage(fmt.Sprintf("%q", other))
			return &copied, true
		}
		return s, false
	}
	var rest []*schema
	nullable := false
	for _, a := range alts {
		if ts := a.types(); len(ts) == 1 && ts[0] == "null" {
			nullable = true
			continue
		}
		rest = append(rest, a)
	}
	if len(rest) == 1 {
		return rest[0], nullable
	}
	copied := *s
	copied.AnyOf, copied.OneOf = rest, nil
	return &copied, nullable
}

type generator struct {
	doc    *document
	merged map[string][]string // union struct name -> member schema names
}

// typeOf is the Go type of a schema; optional makes numbers and objects pointers.
func (g *generator) typeOf(s *schema, optional bool) string {
	if s == nil {
		return "any"
	}
	s, nullable := stripNull(s)
	optional = optional || nullable
	pointer := func(t string) string {
		if optional {
			return "*" + t
		}
		return t
	}
	if s.Ref != "" {
		return pointer(refName(s.Ref))
	}
	if s.Const != nil || s.Enum != nil {
		return "string"
	}
	if alts := append(s.AnyOf, s.OneOf...); len(alts) > 0 {
		var names []string
		for _, a := range alts {
			if a.Ref == "" {
				return "any" // several scalar types
			}
			names = append(names, refName(a.Ref))
		}
		key := strings.Join(names, "|")
		name, ok := unionNames[key]
		if !ok {
			return "json.RawMessage"
		}
		g.merged[name] = names
		return pointer(name)
	}
	ts := s.types()
	if len(ts) != 1 {
		return "any"
	}
	switch ts[0] {
	case "string":
		return "string"
	case "integer":
		return pointer("int64")
	case "number":
		return pointer("float64")
	case "boolean":
		return "bool"
	case "array":
		return "[]" + g.typeOf(s.Items, false)
	case "object":
		if len(s.Properties) == 0 {
			return "map[string]any"
		}
	}
	panic(fmt.Sprintf("unsupported schema %+v", s))
}

func comment(out *bytes.Buffer, text, indent string) {
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		out.WriteString(indent + strings.TrimRight("// "+line, " ") + "\n")
	}
}

// fields writes the struct body: required properties in the document's order, then the rest
// by name.
func (g *generator) fields(out *bytes.Buffer, owner string, properties map[string]*schema, required []string) {
	isRequired := map[string]bool{}
	for _, name := range required {
		isRequired[name] = true
	}
	var optional []string
	for name := range properties {
		if !isRequired[name] {
			optional = append(optional, name)
		}
	}
	sort.Strings(optional)
	for _, name := range append(append([]string{}, required...), optional...) {
		prop := properties[name]
		if prop == nil {
			continue
		}
		_, nullable := stripNull(prop)
		loose := !isRequired[name] || nullable
		tag := name
		if loose {
			tag += ",omitempty"
		}
		if prop.Description != "" {
			comment(out, prop.Description, "\t")
		}
		typ := g.typeOf(prop, loose)
		if typ == "string" && loose && pointerStrings[owner+"."+name] {
			typ = "*string"
		}
		fmt.Fprintf(out, "\t%s %s `json:%q`\n", goName(name), typ, tag)
	}
}

func (g *generator) declare(out *bytes.Buffer, name string, s *schema) {
	if s.Description != "" {
		comment(out, name+": "+s.Description, "")
	} else {
		fmt.Fprintf(out, "// %s is the schema of the same name in clients/openrpc.json.\n", name)
	}
	fmt.Fprintf(out, "type %s struct {\n", name)
	g.fields(out, name, s.Properties, s.Required)
	out.WriteString("}\n\n")
}

// declareUnion writes the struct holding every field of a union's members; a field is
// required only when every member requires it.
func (g *generator) declareUnion(out *bytes.Buffer, name string, members []string) {
	properties := map[string]*schema{}
	counts := map[string]int{}
	var order []string
	for _, member := range members {
		s := g.doc.Components.Schemas[member]
		for _, p := range s.Required {
			if counts[p] == 0 {
				order = append(order, p)
			}
			counts[p]++
		}
		for p, ps := range s.Properties {
			if _, seen := properties[p]; !seen {
				properties[p] = ps
			}
		}
	}
	var required []string
	for _, p := range order {
		if counts[p] == len(members) {
			required = append(required, p)
		}
	}
	fmt.Fprintf(out, "// %s is one of %s (the fields of them all).\n", name, strings.Join(members, ", "))
	fmt.Fprintf(out, "type %s struct {\n", name)
	g.fields(out, name, properties, required)
	out.WriteString("}\n\n")
}

// Generate returns types.go for an OpenRPC document.
func Generate(raw []byte) ([]byte, error) {
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	g := &generator{doc: &doc, merged: map[string][]string{}}
	var body bytes.Buffer

	names := make([]string, 0, len(doc.Components.Schemas))
	for name := range doc.Components.Schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g.declare(&body, name, doc.Components.Schemas[name])
	}
	var unions []string
	for name := range g.merged {
		unions = append(unions, name)
	}
	sort.Strings(unions)
	for _, name := range unions {
		g.declareUnion(&body, name, g.merged[name])
	}

	var out bytes.Buffer
	out.WriteString("// Code generated by internal/gentypes from clients/openrpc.json; DO NOT EDIT.\n")
	out.WriteString("// Regenerate with `go generate ./...`; a test fails when this file is stale.\n\n")
	out.WriteString("package subagentd\n\n")
	if bytes.Contains(body.Bytes(), []byte("json.RawMessage")) {
		out.WriteString("import \"encoding/json\"\n\n")
	}
	fmt.Fprintf(&out, "// WireProtocolVersion is the subagentd wire protocol version these types describe.\n")
	fmt.Fprintf(&out, "const WireProtocolVersion = %d\n\n", doc.Info.ProtocolVersion)
	fmt.Fprintf(&out, "// SchemaVersion is the server version the OpenRPC document was generated from.\n")
	fmt.Fprintf(&out, "const SchemaVersion = %q\n\n", doc.Info.Version)

	type code struct {
		name, data string
		code       int
	}
	var codes []code
	for name, e := range doc.Components.Errors {
		codes = append(codes, code{name, e.Data, e.Code})
	}
	sort.Slice(codes, func(i, j int) bool { return codes[i].code < codes[j].code })
	out.WriteString("// Error codes (PROTOCOL.md §8).\nconst (\n")
	for _, c := range codes {
		if c.data != "" {
			comment(&out, c.data, "\t")
		}
		fmt.Fprintf(&out, "\tCode%s = %d\n", goName(strings.ToLower(c.name)), c.code)
	}
	out.WriteString(")\n\n")
	out.Write(body.Bytes())
	return format.Source(out.Bytes())
}

func main() {
	check := flag.Bool("check", false, "exit 1 when types.go is stale instead of writing it")
	dir := flag.String("dir", ".", "the Go client's directory (clients/go)")
	flag.Parse()
	openrpc := filepath.Join(*dir, "..", "openrpc.json")
	target := filepath.Join(*dir, "types.go")
	raw, err := os.ReadFile(openrpc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	text, err := Generate(raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *check {
		current, _ := os.ReadFile(target)
		if !bytes.Equal(current, text) {
			fmt.Fprintf(os.Stderr, "%s is stale: run `go generate ./...` in clients/go\n", target)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(target, text, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
