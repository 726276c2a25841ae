package subagentd

import (
	"os"
	"strings"
	"testing"
)

func TestReadmeUsageIsTheExampleProgram(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	usage := string(readme)[strings.Index(string(readme), "\n## Usage\n"):]
	start := strings.Index(usage, "\n```go\n")
	end := strings.Index(usage, "\n```\n")
	if start < 0 || end < start {
		t.Fatal("README.md has no ```go block under ## Usage")
	}
	if block := usage[start+len("\n```go\n") : end+1]; block != string(example) {
		t.Fatalf("README.md's Usage block is not example_test.go; copy the file into it")
	}
}
