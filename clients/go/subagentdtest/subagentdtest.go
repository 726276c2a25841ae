// Package subagentdtest is a test kit for host authors: a subagentd served to a test, a scripted
// host that answers turns from a table of replies, and (on the client) WaitFor, which matches a
// notification already received. The same helpers, with the same semantics, as Python's
// subagentd.testing and the TypeScript client's @subagentd/client/testing (docs/testing.md).
package subagentdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	subagentd "github.com/subagentd/subagentd/clients/go"
)

// Wait is how long a kit wait lasts when its context has no deadline.
const Wait = 10 * time.Second

// logs keeps the server's stderr for the failure message (safe for the writing goroutine).
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := l.buf.String()
	if len(text) > 2000 {
		text = text[len(text)-2000:]
	}
	return text
}

// Serve starts a fresh subagentd for t (DB ":memory:" unless opts name a database), initialized.
// When the test ends its stdin is closed, and the test fails unless it exited 0. opts.Command
// defaults to "subagentd" on PATH, as for subagentd.Start.
func Serve(t testing.TB, opts subagentd.Options) *subagentd.Client {
	t.Helper()
	named := opts.DB != ""
	for _, a := range opts.Args {
		named = named || a == "--db" || strings.HasPrefix(a, "--db=")
	}
	if !named {
		opts.DB = ":memory:"
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = Wait
	}
	stderr := &logs{}
	if opts.Stderr == nil {
		opts.Stderr = stderr
	}
	client, err := subagentd.Start(opts)
	if err != nil {
		t.Fatalf("subagentdtest: %v", err)
	}
	t.Cleanup(func() {
		code, err := client.Close(Wait)
		if code != 0 || err != nil {
			t.Errorf("subagentd exited with status %d (%v) after the test: %s", code, err, stderr.tail())
		}
	})
	if _, err := client.Initialize(context.Background(), subagentd.InitializeParams{}); err != nil {
		t.Fatalf("subagentdtest: initialize: %v: %s", err, stderr.tail())
	}
	return client
}

// Reply is a scripted turn: it returns how the turn ends (and may call tools first).
type Reply func(ctx context.Context, start subagentd.TurnStart) (subagentd.TurnOutcome, error)

// Say is a Reply that ends the turn completed with output.
func Say(output string) Reply {
	return func(context.Context, subagentd.TurnStart) (subagentd.TurnOutcome, error) {
		return subagentd.TurnOutcome{Output: output}, nil
	}
}

// End is a Reply that ends the turn with this reason and output.
func End(reason, output string) Reply {
	return func(context.Context, subagentd.TurnStart) (subagentd.TurnOutcome, error) {
		return subagentd.TurnOutcome{Reason: reason, Output: output}, nil
	}
}

// Turn is a turn the scripted host ran: whose, its input (each text block of its messages), its end.
type Turn struct {
	AgentID string
	TurnID  string
	Texts   []string
	Reason  string
	Output  string
}

// ScriptedHost answers turn/starts from Replies: agent id -> its replies, one per turn, in order.
type ScriptedHost struct {
	Client  *subagentd.Client
	Replies map[string][]Reply
	Turns   []Turn
	used    map[string]int
}

// NewScriptedHost is a ScriptedHost on client with this table of replies.
func NewScriptedHost(client *subagentd.Client, replies map[string][]Reply) *ScriptedHost {
	return &ScriptedHost{Client: client, Replies: replies, used: map[string]int{}}
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); has {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, Wait)
}

// RunTurn takes the next turn/start (received already or before ctx ends; Wait without a
// deadline) and ends it with its agent's next reply.
func (h *ScriptedHost) RunTurn(ctx context.Context) (Turn, error) {
	waitCtx, cancel := bounded(ctx)
	raw, err := h.Client.WaitFor(waitCtx, "turn/start", nil)
	cancel()
	if err != nil {
		return Turn{}, fmt.Errorf("scripted host: no turn/start: %w", err)
	}
	var start subagentd.TurnStart
	if err := json.Unmarshal(raw, &start); err != nil {
		return Turn{}, fmt.Errorf("scripted host: turn/start does not decode: %w", err)
	}
	agent := start.AgentID
	texts := []string{}
	for _, m := range start.Messages {
		for _, b := range m.Content {
			texts = append(texts, b.Text)
		}
	}
	number := h.used[agent] + 1
	table := h.Replies[agent]
	if number > len(table) {
		why := fmt.Sprintf("scripted host: no reply left for turn %d of agent %q", number, agent)
		_ = h.Client.EndTurn(ctx, subagentd.TurnEndParams{AgentID: agent, TurnID: start.TurnID, Reason: "error", Output: &why})
		shown, _ := json.Marshal(texts)
		noun := "replies"
		if len(table) == 1 {
			noun = "reply"
		}
		return Turn{}, fmt.Errorf("scripted host: agent %q started its turn %d, but the table has %d %s for it; the turn's input: %s",
			agent, number, len(table), noun, shown)
	}
	h.used[agent] = number
	outcome, err := table[number-1](ctx, start)
	if err != nil {
		outcome = subagentd.TurnOutcome{Reason: "error", Output: err.Error()}
	}
	if outcome.Reason == "" {
		outcome.Reason = "completed"
	}
	ended := subagentd.TurnEndParams{AgentID: agent, TurnID: start.TurnID, Reason: outcome.Reason}
	if outcome.Output != "" {
		ended.Output = &outcome.Output
	}
	if err := h.Client.EndTurn(ctx, ended); err != nil {
		return Turn{}, fmt.Errorf("scripted host: turns/end of %q: %w", agent, err)
	}
	turn := Turn{AgentID: agent, TurnID: start.TurnID, Texts: texts, Reason: outcome.Reason, Output: outcome.Output}
	h.Turns = append(h.Turns, turn)
	return turn, nil
}

// RunUntilIdle runs turns until no agent of agentID's tree runs one or has input to start one
// (agents/wait_idle); the turns run. Each wait for a turn/start is bounded as in RunTurn.
func (h *ScriptedHost) RunUntilIdle(ctx context.Context, agentID string) ([]Turn, error) {
	var ran []Turn
	for {
		idle, err := h.Client.WaitIdle(ctx, agentID, 0)
		if err != nil {
			return ran, err
		}
		if idle.Idle {
			return ran, nil
		}
		turn, err := h.RunTurn(ctx)
		if err != nil {
			running, _ := json.Marshal(append([]string{}, idle.Running...))
			runnable, _ := json.Marshal(append([]string{}, idle.Runnable...))
			return ran, fmt.Errorf("%w while the tree of %q is busy (running %s, runnable %s)", err, agentID, running, runnable)
		}
		ran = append(ran, turn)
	}
}

// Left returns the replies not used yet, by agent (a test may check they are all zero).
func (h *ScriptedHost) Left() map[string]int {
	out := map[string]int{}
	for agent, rs := range h.Replies {
		out[agent] = len(rs) - h.used[agent]
	}
	return out
}
