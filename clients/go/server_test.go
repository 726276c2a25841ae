package subagentd

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
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
