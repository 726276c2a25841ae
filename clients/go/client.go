// Package subagentd is a Go client for subagentd: it spawns the sidecar, speaks its JSON-RPC 2.0
// protocol over stdin/stdout (one JSON value per line) and runs agent turns (RunAgentHost).
// It uses only the standard library.
//
// The request, result and notification types (types.go) are generated from clients/openrpc.json.
package subagentd

//go:generate go run ./internal/gentypes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ClientName and ClientVersion are what Initialize sends as clientInfo unless told otherwise.
const (
	ClientName    = "subagentd-go"
	ClientVersion = "0.1.0"
	// DefaultProtocolVersion is the MCP handshake-era version Initialize proposes.
	DefaultProtocolVersion = "2025-06-18"
)

// Options says how to run subagentd.
type Options struct {
	// Command is the executable; default "subagentd", looked up on PATH.
	Command string
	// Args come before the ones derived from DB and Caller.
	Args []string
	// DB adds "--db DB" (":memory:" for throwaway runs).
	DB string
	// Caller adds "--caller Caller" (the default caller of tools/call).
	Caller string
	// Dir is the working directory of the child; default this process's.
	Dir string
	// Env is the child's environment; nil means this process's.
	Env []string
	// Stderr receives the server's log; nil means this process's stderr (passed through).
	Stderr io.Writer
	// RequestTimeout bounds every Call whose context has no deadline; 0 means 30 s, <0 none.
	RequestTimeout time.Duration
	// OnFrame, when set, sees every JSON frame the server writes (responses, notifications,
	// batches) in arrival order, on the reading goroutine: it must not block.
	OnFrame func(frame json.RawMessage)
	// OnProtocolError, when set, sees every stdout line that is not JSON, on the reading goroutine.
	OnProtocolError func(err error, line []byte)
}

// RPCError is a JSON-RPC error response. Code is one of the Code* constants.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Method is the method of the request that failed.
	Method string `json:"-"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: %s (code %d)", e.Method, e.Message, e.Code)
}

// ErrClosed is returned (wrapped) by calls made after, or pending when, the server went away.
var ErrClosed = errors.New("subagentd connection closed")

// CannotStartError is what calls return when the spawned subagentd could not start (a database
// it cannot use, a --caller root another process serves, a missing extra): its Error is the
// server's own "cannot start: …" line. errors.Is(err, ErrClosed) holds for it.
type CannotStartError struct {
	Line string
}

func (e *CannotStartError) Error() string { return e.Line }

// Unwrap makes a CannotStartError an ErrClosed.
func (e *CannotStartError) Unwrap() error { return ErrClosed }

const (
	cannotStart = "cannot start: "
	stderrKeep  = 64 * 1024       // bytes of the server's stderr kept to find that line
	exitWait    = 2 * time.Second // for a server that closed its stdout to finish its stderr
)

// cannotStartLine is the last "cannot start: …" line in what the server logged (text or JSON
// log format), or "".
func cannotStartLine(logged string) string {
	lines := strings.Split(logged, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		at := strings.Index(line, cannotStart)
		if at < 0 {
			continue
		}
		if strings.HasPrefix(line, "{") {
			var entry struct {
				Message string `json:"message"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Message, cannotStart) {
				return entry.Message
			}
		}
		return strings.TrimRight(line[at:], "\r ")
	}
	return ""
}

// stderrTail passes the server's stderr on and keeps its last stderrKeep bytes.
type stderrTail struct {
	mu   sync.Mutex
	kept []byte
	done chan struct{} // closed at its end
}

func (t *stderrTail) copy(from io.Reader, to io.Writer) {
	defer close(t.done)
	chunk := make([]byte, 32*1024)
	for {
		n, err := from.Read(chunk)
		if n > 0 {
			_, _ = to.Write(chunk[:n])
			t.mu.Lock()
			t.kept = append(t.kept, chunk[:n]...)
			if len(t.kept) > stderrKeep {
				t.kept = append([]byte(nil), t.kept[len(t.kept)-stderrKeep:]...)
			}
			t.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (t *stderrTail) text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.kept)
}

type response struct {
	result json.RawMessage
	err    error
}

type pendingCall struct {
	method string
	done   chan response
}

type handler struct {
	id int64
	fn func(params json.RawMessage)
}

type notification struct {
	method string
	params json.RawMessage
}

// Client is a connection to one subagentd process. Its methods are safe for concurrent use.
// Notifications are dispatched to the handlers registered with On (or the typed OnTurnStart and
// friends) one at a time, in arrival order, on a goroutine of their own: a handler may make calls.
type Client struct {
	opts    Options
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	writeMu sync.Mutex
	timeout time.Duration

	mu          sync.Mutex
	nextID      int64
	pending     map[int64]*pendingCall
	handlers    map[string][]handler
	nextHandler int64
	closed      bool
	closeReason string
	cannotStart *CannotStartError // the server's own reason, when it could not start
	stdinClosed bool
	stderr      *stderrTail

	queueMu   sync.Mutex
	queue     []notification
	queueWake chan struct{}

	logMu   sync.Mutex
	log     []*received   // the last KeepNotifications notifications, for WaitFor
	logWake chan struct{} // closed (and replaced) when a notification is kept

	exited   chan struct{}
	exitCode int
	exitErr  error
}

// Start spawns subagentd and connects to its pipes.
func Start(opts Options) (*Client, error) {
	command := opts.Command
	if command == "" {
		command = "subagentd"
	}
	args := append([]string(nil), opts.Args...)
	if opts.DB != "" {
		args = append(args, "--db", opts.DB)
	}
	if opts.Caller != "" {
		args = append(args, "--caller", opts.Caller)
	}
	cmd := exec.Command(command, args...)
	cmd.Dir = opts.Dir
	cmd.Env = opts.Env
	logTo := opts.Stderr
	if logTo == nil {
		logTo = os.Stderr
	}
	stderr, err := cmd.StderrPipe() // passed on to logTo, its tail kept for a "cannot start" line
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("could not run subagentd: %w", err)
	}
	c := &Client{
		opts:      opts,
		cmd:       cmd,
		stdin:     stdin,
		timeout:   opts.RequestTimeout,
		pending:   map[int64]*pendingCall{},
		handlers:  map[string][]handler{},
		queueWake: make(chan struct{}, 1),
		logWake:   make(chan struct{}),
		exited:    make(chan struct{}),
		stderr:    &stderrTail{done: make(chan struct{})},
	}
	go c.stderr.copy(stderr, logTo)
	if c.timeout == 0 {
		c.timeout = 30 * time.Second
	}
	go c.read(stdout)
	go c.dispatchNotifications()
	return c, nil
}

// --- requests -----------------------------------------------------------------------------------

// Call sends a request and decodes its result into result (unless nil). An error response is an
// *RPCError. When ctx ends first (or the client's RequestTimeout passes), the server is sent
// notifications/cancelled and ctx's error is returned.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	call := &pendingCall{method: method, done: make(chan response, 1)}
	c.mu.Lock()
	if c.closed {
		reason, cannot := c.closeReason, c.cannotStart
		c.mu.Unlock()
		if cannot != nil {
			return cannot
		}
		return fmt.Errorf("%s: %w: %s", method, ErrClosed, reason)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = call
	c.mu.Unlock()

	frame := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		frame["params"] = params
	}
	if err := c.SendFrame(frame); err != nil {
		c.forget(id)
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-call.done:
		if r.err != nil {
			return r.err
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(r.result, result); err != nil {
			return fmt.Errorf("%s: decoding the result: %w", method, err)
		}
		return nil
	case <-ctx.Done():
		if c.forget(id) {
			_ = c.Notify("notifications/cancelled", map[string]any{"requestId": id, "reason": ctx.Err().Error()})
		}
		return fmt.Errorf("%s (id %d): %w", method, id, ctx.Err())
	}
}

// forget drops a pending call; false when it was already answered.
func (c *Client) forget(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// Notify sends a notification (never answered).
func (c *Client) Notify(method string, params any) error {
	frame := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		frame["params"] = params
	}
	return c.SendFrame(frame)
}

// SendFrame writes one JSON value as a frame (for tests and custom traffic).
func (c *Client) SendFrame(frame any) error {
	var buf bytes.Buffer
	encoder := json.NewEncoder(&buf)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(frame); err != nil { // Encode ends the line
		return err
	}
	return c.write(buf.Bytes())
}

// SendRaw writes text and a newline to the server's stdin, verbatim.
func (c *Client) SendRaw(text string) error {
	return c.write([]byte(text + "\n"))
}

func (c *Client) write(line []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	closed, reason, cannot := c.closed || c.stdinClosed, c.closeReason, c.cannotStart
	c.mu.Unlock()
	if cannot != nil {
		return cannot
	}
	if closed {
		if reason == "" {
			reason = "stdin is closed"
		}
		return fmt.Errorf("%w: %s", ErrClosed, reason)
	}
	_, err := c.stdin.Write(line)
	return err
}

// --- incoming -----------------------------------------------------------------------------------

func (c *Client) read(stdout io.Reader) {
	reader := bufio.NewReaderSize(stdout, 64*1024)
	for {
		line, err := reader.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) > 0 {
			c.onLine(line)
		}
		if err != nil {
			break
		}
	}
	select { // its stderr ends when it exits: a server that could not start said why there
	case <-c.stderr.done:
	case <-time.After(exitWait):
	}
	if line := cannotStartLine(c.stderr.text()); line != "" {
		c.mu.Lock()
		c.cannotStart = &CannotStartError{Line: line}
		c.mu.Unlock()
	}
	c.shutdown("subagentd closed its stdout")
	c.exitErr = c.cmd.Wait()
	c.exitCode = -1
	if c.cmd.ProcessState != nil {
		c.exitCode = c.cmd.ProcessState.ExitCode()
	}
	close(c.exited)
}

func (c *Client) onLine(line []byte) {
	if !json.Valid(line) {
		if c.opts.OnProtocolError != nil {
			c.opts.OnProtocolError(errors.New("not JSON"), line)
		}
		return
	}
	frame := json.RawMessage(append([]byte(nil), line...))
	if c.opts.OnFrame != nil {
		c.opts.OnFrame(frame)
	}
	if trimmed := bytes.TrimSpace(frame); len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(frame, &batch) == nil {
			for _, m := range batch {
				c.dispatch(m)
			}
		}
		return
	}
	c.dispatch(frame)
}

func (c *Client) dispatch(raw json.RawMessage) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	if m.Method != nil {
		if len(m.ID) > 0 && string(m.ID) != "null" {
			// subagentd sends no requests; answer any politely so a peer never hangs.
			_ = c.SendFrame(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": CodeMethodNotFound, "message": "method not found"}})
			return
		}
		c.keep(*m.Method, m.Params)
		c.queueMu.Lock()
		c.queue = append(c.queue, notification{*m.Method, m.Params})
		c.queueMu.Unlock()
		select {
		case c.queueWake <- struct{}{}:
		default:
		}
		return
	}
	var id int64
	if json.Unmarshal(m.ID, &id) != nil {
		return // a response to a frame sent with SendFrame/SendRaw, or id null
	}
	c.mu.Lock()
	call := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if call == nil {
		return
	}
	if m.Error != nil {
		m.Error.Method = call.method
		call.done <- response{err: m.Error}
		return
	}
	call.done <- response{result: m.Result}
}

func (c *Client) dispatchNotifications() {
	for {
		c.queueMu.Lock()
		batch := c.queue
		c.queue = nil
		c.queueMu.Unlock()
		for _, n := range batch {
			c.mu.Lock()
			hs := append([]handler(nil), c.handlers[n.method]...)
			c.mu.Unlock()
			for _, h := range hs {
				h.fn(n.params)
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-c.queueWake:
		case <-c.exited:
			c.queueMu.Lock()
			empty := len(c.queue) == 0
			c.queueMu.Unlock()
			if empty {
				return
			}
		}
	}
}

func (c *Client) shutdown(reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeReason = reason
	cannot := c.cannotStart
	pending := c.pending
	c.pending = map[int64]*pendingCall{}
	c.mu.Unlock()
	for _, call := range pending {
		if cannot != nil {
			call.done <- response{err: cannot}
			continue
		}
		call.done <- response{err: fmt.Errorf("%s: %w: %s before answering", call.method, ErrClosed, reason)}
	}
}

// On registers fn for the notification method; the returned function removes it (Options.OnFrame
// sees every frame). fn runs on the dispatching goroutine, one notification at a time, in order.
func (c *Client) On(method string, fn func(params json.RawMessage)) (remove func()) {
	c.mu.Lock()
	c.nextHandler++
	id := c.nextHandler
	c.handlers[method] = append(c.handlers[method], handler{id, fn})
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		hs := c.handlers[method]
		for i, h := range hs {
			if h.id == id {
				c.handlers[method] = append(hs[:i:i], hs[i+1:]...)
				return
			}
		}
	}
}

// onTyped registers fn for method with params decoded into T (undecodable params are logged).
func onTyped[T any](c *Client, method string, fn func(T)) func() {
	return c.On(method, func(raw json.RawMessage) {
		var params T
		if err := json.Unmarshal(raw, &params); err != nil {
			fmt.Fprintf(os.Stderr, "subagentd: %s params do not decode: %v\n", method, err)
			return
		}
		fn(params)
	})
}

// OnTurnStart registers fn for turn/start.
func (c *Client) OnTurnStart(fn func(TurnStart)) func() { return onTyped(c, "turn/start", fn) }

// OnTurnInterrupt registers fn for turn/interrupt.
func (c *Client) OnTurnInterrupt(fn func(TurnInterrupt)) func() {
	return onTyped(c, "turn/interrupt", fn)
}

// OnAgentSettled registers fn for agent/settled.
func (c *Client) OnAgentSettled(fn func(AgentSettled)) func() {
	return onTyped(c, "agent/settled", fn)
}

// OnAgentInject registers fn for agent/inject.
func (c *Client) OnAgentInject(fn func(AgentInject)) func() { return onTyped(c, "agent/inject", fn) }

// OnAgentStatus registers fn for agent/status (sent after Initialize with params.WithStatusEvents()).
func (c *Client) OnAgentStatus(fn func(AgentStatus)) func() { return onTyped(c, "agent/status", fn) }

// SettledOf returns a channel that receives the next agent/settled of agentID arriving after
// this call (then it stops watching). Call it before the request that may settle the agent.
func (c *Client) SettledOf(agentID string) <-chan AgentSettled {
	got := make(chan AgentSettled, 1)
	var once sync.Once
	var remove func()
	removed := make(chan struct{})
	remove = c.OnAgentSettled(func(s AgentSettled) {
		if s.AgentID != agentID {
			return
		}
		once.Do(func() {
			got <- s
			<-removed
			remove()
		})
	})
	close(removed)
	return got
}

// --- lifecycle ----------------------------------------------------------------------------------

// Closed reports whether the server has gone away.
func (c *Client) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Exited is closed when the server process has exited.
func (c *Client) Exited() <-chan struct{} { return c.exited }

// Close ends stdin (the server drains, commits and exits) and returns its exit code. After
// timeout (0: 10 s) the process is sent SIGTERM, then killed after as long again.
func (c *Client) Close(timeout time.Duration) (int, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c.writeMu.Lock()
	c.mu.Lock()
	already := c.stdinClosed
	c.stdinClosed = true
	c.mu.Unlock()
	if !already {
		_ = c.stdin.Close()
	}
	c.writeMu.Unlock()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(timeout):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	var exitErr *exec.ExitError
	if c.exitErr != nil && !errors.As(c.exitErr, &exitErr) {
		return c.exitCode, c.exitErr
	}
	return c.exitCode, nil
}

// Initialize performs the handshake (initialize, then notifications/initialized).
func (c *Client) Initialize(ctx context.Context, params InitializeParams) (InitializeResult, error) {
	if params.ProtocolVersion == "" {
		params.ProtocolVersion = DefaultProtocolVersion
	}
	if params.ClientInfo == nil {
		params.ClientInfo = map[string]any{"name": ClientName, "version": ClientVersion}
	}
	var result InitializeResult
	if err := c.Call(ctx, "initialize", params, &result); err != nil {
		return result, err
	}
	return result, c.Notify("notifications/initialized", map[string]any{})
}

// WithStatusEvents returns params asking for agent/status notifications
// (capabilities.experimental.subagentd.statusEvents); the other capabilities are kept.
func (params InitializeParams) WithStatusEvents() InitializeParams {
	capabilities := map[string]any{}
	for k, v := range params.Capabilities {
		capabilities[k] = v
	}
	capabilities["experimental"] = map[string]any{"subagentd": map[string]any{"statusEvents": true}}
	params.Capabilities = capabilities
	return params
}

// Ping checks the server answers.
func (c *Client) Ping(ctx context.Context) error { return c.Call(ctx, "ping", map[string]any{}, nil) }
