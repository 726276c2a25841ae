package subagentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// TurnFunc runs one turn of start.AgentID on start.Messages. ctx is cancelled when subagentd
// sends turn/interrupt for the turn (InterruptOf(ctx) says why) or the host stops; the function
// should then return promptly. A returned error (or a panic) ends the turn with reason "error"
// and the error's text as its output, and goes to HostOptions.OnError; after an interrupt the
// turn is reported "aborted" instead, and the error is not reported.
type TurnFunc func(ctx context.Context, start TurnStart) (TurnOutcome, error)

// TurnOutcome is how a turn ended: Reason defaults to "completed" ("aborted" is reported
// whenever the turn was interrupted); Output is the agent's closing message ("" for none).
type TurnOutcome struct {
	Reason string
	Output string
}

// HostOptions configure RunAgentHost.
type HostOptions struct {
	Turn TurnFunc
	// OnError is called when a turn fails (not after an interrupt) or turns/end fails.
	// Default: ReportTurnError, which prints the error to stderr.
	OnError func(err error, start TurnStart)
	// OnTurnEnd is called after turns/end was acknowledged; output is nil for no closing message.
	OnTurnEnd func(start TurnStart, reason string, output *string)
}

// PanicError is a panic recovered from a TurnFunc.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ReportTurnError is the default OnError: it prints the failure (and a panic's stack) to stderr.
func ReportTurnError(err error, start TurnStart) {
	fmt.Fprintf(os.Stderr, "subagentd: turn %s of agent %q failed: %v\n", start.TurnID, start.AgentID, err)
	var p *PanicError
	if errors.As(err, &p) {
		os.Stderr.Write(p.Stack)
	}
}

type turnKey struct{}

type runningTurn struct {
	start     TurnStart
	cancel    context.CancelFunc
	interrupt atomic.Pointer[TurnInterrupt]
}

// InterruptOf returns the turn/interrupt that cancelled a turn's context (a "shutdown" cause
// after Host.Stop), or nil while the turn was not interrupted.
func InterruptOf(ctx context.Context) *TurnInterrupt {
	if t, ok := ctx.Value(turnKey{}).(*runningTurn); ok {
		return t.interrupt.Load()
	}
	return nil
}

// Host runs agent turns as subagentd asks for them.
type Host struct {
	client  *Client
	opts    HostOptions
	removes []func()

	mu      sync.Mutex
	running map[string]*runningTurn
	idle    chan struct{} // closed while no turn runs
}

// RunAgentHost reacts to turn/start by calling opts.Turn and then turns/end with its outcome,
// and to turn/interrupt by cancelling that turn's context (the turn is then reported "aborted").
func RunAgentHost(c *Client, opts HostOptions) *Host {
	if opts.OnError == nil {
		opts.OnError = ReportTurnError
	}
	h := &Host{client: c, opts: opts, running: map[string]*runningTurn{}, idle: make(chan struct{})}
	close(h.idle)
	h.removes = []func(){c.OnTurnStart(h.begin), c.OnTurnInterrupt(h.interrupt)}
	return h
}

// begin runs on the client's dispatching goroutine, so a turn's interrupt always finds it.
func (h *Host) begin(start TurnStart) {
	t := &runningTurn{start: start}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), turnKey{}, t))
	t.cancel = cancel
	h.mu.Lock()
	if len(h.running) == 0 {
		h.idle = make(chan struct{})
	}
	h.running[start.TurnID] = t
	h.mu.Unlock()
	go h.run(ctx, t)
}

func (h *Host) interrupt(i TurnInterrupt) {
	h.mu.Lock()
	t := h.running[i.TurnID]
	h.mu.Unlock()
	if t != nil && t.interrupt.CompareAndSwap(nil, &i) {
		t.cancel()
	}
}

func (h *Host) call(ctx context.Context, start TurnStart) (outcome TurnOutcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.opts.Turn(ctx, start)
}

func (h *Host) run(ctx context.Context, t *runningTurn) {
	start := t.start
	outcome, err := h.call(ctx, start)
	interrupted := t.interrupt.Load() != nil
	reason, output := outcome.Reason, &outcome.Output
	switch {
	case interrupted:
		reason = ReasonAborted
		if err != nil {
			output = nil
		}
	case err != nil:
		reason = ReasonError
		text := err.Error()
		output = &text
		h.opts.OnError(err, start)
	case reason == "":
		reason = ReasonCompleted
	}
	if output != nil && *output == "" {
		output = nil
	}
	t.cancel()
	endErr := h.client.EndTurn(context.Background(), TurnEndParams{AgentID: start.AgentID, TurnID: start.TurnID, Reason: reason, Output: output})
	if endErr != nil {
		h.opts.OnError(endErr, start)
	} else if h.opts.OnTurnEnd != nil {
		h.opts.OnTurnEnd(start, reason, output)
	}
	h.mu.Lock()
	delete(h.running, start.TurnID)
	if len(h.running) == 0 {
		close(h.idle)
	}
	h.mu.Unlock()
}

// Running returns the turns running now.
func (h *Host) Running() []TurnStart {
	h.mu.Lock()
	defer h.mu.Unlock()
	turns := make([]TurnStart, 0, len(h.running))
	for _, t := range h.running {
		turns = append(turns, t.start)
	}
	return turns
}

// Wait returns when no turn is running (at once when none is), or with ctx's error.
func (h *Host) Wait(ctx context.Context) error {
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop stops taking turns; running turns are cancelled (cause "shutdown") and still reported.
func (h *Host) Stop() {
	for _, remove := range h.removes {
		remove()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, t := range h.running {
		i := TurnInterrupt{AgentID: t.start.AgentID, TurnID: id, Cause: InterruptCause{Kind: "shutdown"}}
		if t.interrupt.CompareAndSwap(nil, &i) {
			t.cancel()
		}
	}
}
