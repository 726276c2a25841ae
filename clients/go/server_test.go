package subagentd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// serverCommand is the subagentd the tests drive: $SUBAGENTD, else `subagentd` on PATH.
func serverCommand(t *testing.T) string {
	t.Helper()
	if command := os.Getenv("SUBAGENTD"); command != "" {
		return command
	}
	command, err := exec.LookPath("subagentd")
	if err != nil {
		t.Fatalf("no subagentd to test against: set SUBAGENTD or put subagentd on PATH (%v)", err)
	}
	return command
}

// logBuffer keeps the server's stderr for failure messages.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	text := b.buf.String()
	if len(text) > 4000 {
		text = text[len(text)-4000:]
	}
	return text
}

// startServer starts a fresh in-memory subagentd; opts fills in what the test needs.
func startServer(t *testing.T, opts Options) (*Client, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts.Command = serverCommand(t)
	opts.DB = ":memory:"
	opts.Stderr = logs
	client, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !client.Closed() {
			_, _ = client.Close(0)
		}
	})
	return client, logs
}

// bounded is a context for one test's calls: at most 60 s, cancelled when the test ends.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// initialize performs the handshake with the default parameters.
func initialize(ctx context.Context, t *testing.T, client *Client) {
	t.Helper()
	if _, err := client.Initialize(ctx, InitializeParams{}); err != nil {
		t.Fatal(err)
	}
}

// rootWithChild opens the agent "root" and spawns its child "c1" with this label and prompt.
func rootWithChild(ctx context.Context, t *testing.T, client *Client, label, prompt string) {
	t.Helper()
	if _, err := client.OpenAgent(ctx, OpenParams{AgentID: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Spawn(ctx, SpawnParams{Caller: "root", ChildID: "c1", Label: label, Prompt: prompt}); err != nil {
		t.Fatal(err)
	}
}

// A subagentd that cannot start: every call returns its own "cannot start: …" line, and its log
// still reaches Options.Stderr.
func TestAServerThatCannotStartIsItsOwnLine(t *testing.T) {
	db := t.TempDir() + "/bad.db"
	if err := os.WriteFile(db, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--log-format", "json"}} {
		logs := &logBuffer{}
		client, err := Start(Options{Command: serverCommand(t), Args: args, DB: db, Stderr: logs})
		if err != nil {
			t.Fatal(err)
		}
		want := "cannot start: " + db + " is not a SQLite database"
		for _, call := range []string{"initialize", "ping"} {
			var err error
			if call == "initialize" {
				_, err = client.Initialize(bounded(t), InitializeParams{})
			} else {
				err = client.Ping(bounded(t))
			}
			var cannot *CannotStartError
			if !errors.As(err, &cannot) || err.Error() != want || !errors.Is(err, ErrClosed) {
				t.Fatalf("%s: got %v, want %q", call, err, want)
			}
		}
		if code, _ := client.Close(0); code != 1 {
			t.Fatalf("exit %d", code)
		}
		if !strings.Contains(logs.String(), "cannot start: ") {
			t.Fatalf("the log was not passed on: %q", logs.String())
		}
	}
}
