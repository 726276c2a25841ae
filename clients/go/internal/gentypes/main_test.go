package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestTypesGoIsGeneratedFromOpenRPC fails when clients/go/types.go differs from what
// clients/openrpc.json generates: regenerate with `go generate ./...` in clients/go.
func TestTypesGoIsGeneratedFromOpenRPC(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "openrpc.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "types.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("clients/go/types.go is stale: run `go generate ./...` in clients/go")
	}
}

// TestAFieldAddedToTheSchemaReachesTheStruct adds a property to a params schema and finds it
// in the generated struct, with Go's name, the optional tag and a pointer for a number.
func TestAFieldAddedToTheSchemaReachesTheStruct(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "openrpc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	properties := schemas["FollowupParams"].(map[string]any)["properties"].(map[string]any)
	properties["retry_after_ms"] = map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "null"}}}
	added, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	text, err := Generate(added)
	if err != nil {
		t.Fatal(err)
	}
	field := regexp.MustCompile(`(?m)^\tRetryAfterMs\s+\*int64\s+` + "`json:\"retry_after_ms,omitempty\"`$")
	if !field.Match(text) {
		t.Fatalf("the added field is missing:\n%s", text)
	}
}

func TestGoNames(t *testing.T) {
	for in, want := range map[string]string{
		"agent_id": "AgentID", "ttlMs": "TTLMs", "_meta": "Meta", "p50_ms": "P50Ms",
		"requestId": "RequestID", "uriTemplate": "URITemplate", "oldest_queued_age_s": "OldestQueuedAgeS",
		"agent_ids": "AgentIDs", "isError": "IsError",
	} {
		if got := goName(in); got != want {
			t.Errorf("goName(%q) = %q, want %q", in, got, want)
		}
	}
}
