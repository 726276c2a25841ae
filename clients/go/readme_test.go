package subagentd

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func readme(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// blocks are the README's fenced blocks of one language, in order.
func blocks(text, language string) []string {
	var found []string
	fence := "\n```" + language + "\n"
	for {
		start := strings.Index(text, fence)
		if start < 0 {
			return found
		}
		text = text[start+len(fence):]
		end := strings.Index(text, "\n```\n")
		if end < 0 {
			return found
		}
		found = append(found, text[:end+1])
		text = text[end:]
	}
}

func TestReadmeUsageIsTheExampleProgram(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	text := readme(t)
	usage := text[strings.Index(text, "\n## Usage as a test\n"):]
	if got := blocks(usage, "go"); len(got) == 0 || got[0] != string(example) {
		t.Fatalf("README.md's Usage block is not example_test.go; copy the file into it")
	}
}

func goCommand(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("go"); err == nil {
		return path
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// withoutGoLine is a go.mod without its `go` line (which names the Go that wrote it).
func withoutGoLine(mod string) string {
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(mod), "\n") {
		if !strings.HasPrefix(line, "go ") && line != "" {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// The README's set-up commands run as written beside a clone (here, a link to this checkout),
// give the go.mod it shows, and every Go block but the example test (which `go test` compiles
// as it is) builds there as main.go; the complete host also runs against the real server.
func TestReadmeGoSnippetsCompileAndTheHostRuns(t *testing.T) {
	text := readme(t)
	setup := blocks(text, "sh")
	var gomod string
	for _, block := range blocks(text, "text") {
		if strings.HasPrefix(block, "module ") {
			gomod = block
		}
	}
	if len(setup) != 1 || gomod == "" {
		t.Fatalf("README.md needs one sh block (the set-up) and a go.mod block")
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	beside := t.TempDir()
	if err := os.Symlink(filepath.Join(here, "..", ".."), filepath.Join(beside, "subagentd")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=")
	shell := exec.Command("bash", "-euo", "pipefail", "-c", setup[0])
	shell.Dir, shell.Env = beside, env
	if out, err := shell.CombinedOutput(); err != nil {
		t.Fatalf("the README's set-up failed: %v\n%s", err, out)
	}
	module := filepath.Join(beside, "myhost")
	made, err := os.ReadFile(filepath.Join(module, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if withoutGoLine(string(made)) != withoutGoLine(gomod) {
		t.Fatalf("the set-up wrote this go.mod, not the README's:\n%s", made)
	}
	built := 0
	for i, block := range blocks(text, "go") {
		if strings.HasPrefix(block, "package subagentd_test") {
			continue
		}
		if !strings.HasPrefix(block, "package main\n") {
			t.Fatalf("Go block %d is not a complete program (package main):\n%s", i, block)
		}
		if err := os.WriteFile(filepath.Join(module, "main.go"), []byte(block), 0o644); err != nil {
			t.Fatal(err)
		}
		build := exec.Command(goCommand(t), "build", "-o", "host", ".")
		build.Dir, build.Env = module, env
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("Go block %d does not compile as written: %v\n%s\n%s", i, err, out, block)
		}
		built++
		if !strings.Contains(block, "RunAgentHost(") {
			continue
		}
		run := exec.Command(filepath.Join(module, "host"))
		run.Env = append(os.Environ(), "SUBAGENTD="+serverCommand(t))
		out, err := run.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's host failed: %v\n%s", err, out)
		}
		for _, want := range []string{
			"researcher turn completed\n",
			"researcher settled: completed\n",
			"root turn completed\n",
		} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("the README's host printed no %q:\n%s", want, out)
			}
		}
	}
	if built < 2 {
		t.Fatalf("only %d Go block(s) built; the README has a complete host and a render program", built)
	}
}
