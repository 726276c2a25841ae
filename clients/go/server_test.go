package subagentd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
