package subagentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

const wait = 30 * time.Second

func texts(m Message) []string {
	out := make([]string, len(m.Content))
	for i, block := range m.Content {
		out[i] = block.Text
	}
	return out
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
	}
	panic("unreachable")
}

func sameStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// A root spawns c1, which reports and finishes; root hears both; a send_message starts c1 again;
// an interrupt cancels c1's turn's context, which is reported aborted. All through RunAgentHost.
func TestSpawnTurnReportSettleThroughTheHost(t *testing.T) {
	client, logs := startServer(t, Options{})
	ctx := context.Background()
	init, err := client.Initialize(ctx, InitializeParams{})
	if err != nil {
		t.Fatal(err)
	}
	if init.ServerInfo.Name != "subagentd" || init.ProtocolVersion != DefaultProtocolVersion {
		t.Fatalf("initialize: %+v", init)
	}

	rootMessages := make(chan Message, 16)
	reported := make(chan ReportResult, 1)
	interrupted := make(chan *TurnInterrupt, 1)
	c1Turns := make(chan TurnStart, 4)
	var mu sync.Mutex
	var ended []string
	var failures []error
	host := RunAgentHost(client, HostOptions{
		Turn: func(ctx context.Context, start TurnStart) (TurnOutcome, error) {
			if start.AgentID == "root" {
				for _, m := range start.Messages {
					rootMessages <- m
				}
				return TurnOutcome{Output: "noted"}, nil
			}
			c1Turns <- start
			switch texts(start.Messages[0])[0] {
			case "find it":
				r, err := client.Report(ctx, ReportParams{Caller: start.AgentID, Activation: start.ActivationID, Output: "found it"})
				if err != nil {
					return TurnOutcome{}, err
				}
				reported <- r
				return TurnOutcome{Output: "done"}, nil
			case "wait for me":
				<-ctx.Done()
				interrupted <- InterruptOf(ctx)
				return TurnOutcome{}, ctx.Err()
			}
			return TurnOutcome{Reason: ReasonRefusal, Output: "no"}, nil
		},
		OnError: func(err error, start TurnStart) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, fmt.Errorf("%s: %w", start.AgentID, err))
		},
		OnTurnEnd: func(start TurnStart, reason string, output *string) {
			mu.Lock()
			defer mu.Unlock()
			text := "<none>"
			if output != nil {
				text = *output
			}
			ended = append(ended, start.AgentID+" "+reason+" "+text)
		},
	})
	settled := make(chan AgentSettled, 8)
	client.OnAgentSettled(func(s AgentSettled) { settled <- s })

	root, err := client.OpenAgent(ctx, OpenParams{AgentID: "root", Label: "coordinator"})
	if err != nil {
		t.Fatal(err)
	}
	spawned, err := client.Spawn(ctx, SpawnParams{Caller: root.AgentID, ChildID: "c1", Label: "researcher", Prompt: "find it"})
	if err != nil {
		t.Fatal(err)
	}
	if spawned.ChildID != "c1" || spawned.Text != "started subagent c1" {
		t.Fatalf("spawn: %+v", spawned)
	}
	first := receive(t, c1Turns, "turn of c1")
	if first.Messages[0].Source != (Source{Kind: "coordinator", Form: "spawn", SenderSessionID: "root"}) || first.Instructions == "" {
		t.Fatalf("c1's first turn: %+v", first)
	}
	r := receive(t, reported, "report")
	if r.Text != "report accepted by the agent that started you as message "+r.MessageID {
		t.Fatalf("report: %+v", r)
	}
	if s := receive(t, settled, "agent/settled"); s != (AgentSettled{AgentID: "c1", Reason: ReasonCompleted}) {
		t.Fatalf("settled: %+v", s)
	}
	report := receive(t, rootMessages, "the report at root")
	if !sameStrings(texts(report), []string{"Background subagent c1 reported:", "found it"}) ||
		report.Source != (Source{Kind: "subagent-report", Form: "relay", SenderSessionID: "c1"}) || report.MessageID != r.MessageID {
		t.Fatalf("root's report message: %+v", report)
	}
	notice := receive(t, rootMessages, "the settlement notice at root")
	finished := "Background subagent c1 finished and will do no further work unless you send it more."
	if !sameStrings(texts(notice), []string{finished, "Its closing message:", "done"}) ||
		notice.Source != (Source{Kind: "subagent-settled", Form: "notice", SenderSessionID: "c1", Summary: finished}) {
		t.Fatalf("root's notice: %+v", notice)
	}

	listed, err := client.ListAgents(ctx, ListAgentsParams{Caller: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.Agents) != 1 || listed.Agents[0].ID != "c1" || listed.Agents[0].Kind != "child" || listed.Agents[0].Label != "researcher" {
		t.Fatalf("list_agents: %+v", listed)
	}

	// send_message starts c1 again; root interrupts that turn: its context is cancelled.
	sent, err := client.SendMessage(ctx, SendMessageParams{Caller: "root", SubagentID: "c1", Message: "wait for me"})
	if err != nil {
		t.Fatal(err)
	}
	if sent.MessageID == "" || sent.Text != "message queued as the next turn for subagent c1" {
		t.Fatalf("send_message: %+v", sent)
	}
	second := receive(t, c1Turns, "second turn of c1")
	if second.Messages[0].Source != (Source{Kind: "coordinator", Form: "relay", SenderSessionID: "root"}) {
		t.Fatalf("c1's second turn: %+v", second)
	}
	stopped, err := client.InterruptAgent(ctx, InterruptAgentParams{Caller: "root", AgentID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if !stopped.Accepted || stopped.PreviousStatus != "running" {
		t.Fatalf("interrupt_agent: %+v", stopped)
	}
	cause := receive(t, interrupted, "the interrupt in c1's context")
	if cause == nil || *cause != (TurnInterrupt{AgentID: "c1", TurnID: second.TurnID, Cause: InterruptCause{Kind: "parent", By: "root"}}) {
		t.Fatalf("InterruptOf: %+v", cause)
	}
	if s := receive(t, settled, "agent/settled"); s != (AgentSettled{AgentID: "c1", Reason: ReasonAborted}) {
		t.Fatalf("settled: %+v", s)
	}
	stoppedNotice := receive(t, rootMessages, "the second notice at root")
	if texts(stoppedNotice)[0] != "Background subagent c1 was stopped before it finished." {
		t.Fatalf("root's second notice: %+v", stoppedNotice)
	}

	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := host.Wait(waitCtx); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseAgent(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	host.Stop()
	if code, err := client.Close(0); code != 0 || err != nil {
		t.Fatalf("exit %d %v\n%s", code, err, logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 0 {
		t.Fatalf("turn failures: %v", failures)
	}
	// Per agent, in order (root's turns interleave with c1's).
	var c1Ended, rootEnded []string
	for _, e := range ended {
		if strings.HasPrefix(e, "c1 ") {
			c1Ended = append(c1Ended, e)
		} else {
			rootEnded = append(rootEnded, e)
		}
	}
	if !sameStrings(c1Ended, []string{"c1 completed done", "c1 aborted <none>"}) ||
		!sameStrings(rootEnded, []string{"root completed noted", "root completed noted", "root completed noted"}) {
		t.Fatalf("turns ended: %q", ended)
	}
}

// failingChild runs a root whose child c1 fails through turn; it returns what root heard.
func failingChild(t *testing.T, turn TurnFunc, onError func(error, TurnStart)) (notice Message, ended string) {
	client, _ := startServer(t, Options{})
	ctx := context.Background()
	initialize(ctx, t, client)
	rootMessages := make(chan Message, 4)
	endedCh := make(chan string, 4)
	host := RunAgentHost(client, HostOptions{
		Turn: func(ctx context.Context, start TurnStart) (TurnOutcome, error) {
			if start.AgentID == "root" {
				rootMessages <- start.Messages[0]
				return TurnOutcome{}, nil
			}
			return turn(ctx, start)
		},
		OnError: onError,
		OnTurnEnd: func(start TurnStart, reason string, output *string) {
			if start.AgentID == "c1" {
				endedCh <- reason + " " + *output
			}
		},
	})
	settled := make(chan AgentSettled, 1)
	client.OnAgentSettled(func(s AgentSettled) { settled <- s })
	rootWithChild(ctx, t, client, "worker", "work")
	if s := receive(t, settled, "agent/settled"); s != (AgentSettled{AgentID: "c1", Reason: ReasonError}) {
		t.Fatalf("settled: %+v", s)
	}
	notice = receive(t, rootMessages, "the notice at root")
	ended = receive(t, endedCh, "c1's turn end")
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := host.Wait(waitCtx); err != nil {
		t.Fatal(err)
	}
	host.Stop()
	if code, err := client.Close(0); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
	return notice, ended
}

func TestATurnErrorEndsTheTurnErrorWithItsMessage(t *testing.T) {
	var reported []error
	notice, ended := failingChild(t,
		func(context.Context, TurnStart) (TurnOutcome, error) {
			return TurnOutcome{}, errors.New("the model is unavailable")
		},
		func(err error, start TurnStart) {
			reported = append(reported, fmt.Errorf("%s: %w", start.AgentID, err))
		},
	)
	if ended != "error the model is unavailable" {
		t.Fatalf("c1 ended %q", ended)
	}
	want := []string{"Background subagent c1 failed before it finished.", "Its closing message:", "the model is unavailable"}
	if !sameStrings(texts(notice), want) {
		t.Fatalf("notice %q", texts(notice))
	}
	if len(reported) != 1 || reported[0].Error() != "c1: the model is unavailable" {
		t.Fatalf("OnError got %v", reported)
	}
}

func TestWithoutOnErrorAFailingTurnIsPrintedToStderr(t *testing.T) {
	read, write, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = write
	printed := make(chan string, 1)
	go func() {
		data, _ := io.ReadAll(read)
		printed <- string(data)
	}()
	notice, ended := func() (Message, string) {
		defer func() { os.Stderr = saved }()
		return failingChild(t, func(context.Context, TurnStart) (TurnOutcome, error) { panic("boom") }, nil)
	}()
	write.Close()
	text := <-printed
	if ended != "error panic: boom" || texts(notice)[2] != "panic: boom" {
		t.Fatalf("ended %q, notice %q", ended, texts(notice))
	}
	if !strings.HasPrefix(text, "subagentd: turn ") || !strings.Contains(text, ` of agent "c1" failed: panic: boom`+"\n") ||
		!strings.Contains(text, "goroutine ") {
		t.Fatalf("stderr: %q", text)
	}
}

func TestConcurrentCallsErrorsAndNotificationsInOrder(t *testing.T) {
	client, _ := startServer(t, Options{})
	ctx := context.Background()
	var rpcErr *RPCError
	if err := client.Call(ctx, "agents/get", map[string]string{"agent_id": "x"}, nil); !errors.As(err, &rpcErr) || rpcErr.Code != CodeNotInitialized || rpcErr.Method != "agents/get" {
		t.Fatalf("before initialize: %v", err)
	}
	if _, err := client.Initialize(ctx, InitializeParams{}.WithStatusEvents()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%2 == 0 {
				errs <- client.Ping(ctx)
				return
			}
			_, err := client.GetAgent(ctx, fmt.Sprintf("nobody-%d", i))
			var rpcErr *RPCError
			if !errors.As(err, &rpcErr) || rpcErr.Code != CodeUnknownAgent || rpcErr.Message != fmt.Sprintf(`agent "nobody-%d" does not exist`, i) {
				errs <- fmt.Errorf("agents/get: %v", err)
				return
			}
			errs <- nil
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var statuses []string
	client.OnAgentStatus(func(s AgentStatus) {
		mu.Lock()
		statuses = append(statuses, s.AgentID+" "+s.Status)
		mu.Unlock()
	})
	removed := make(chan string, 8)
	remove := client.On("agent/status", func(params json.RawMessage) { removed <- string(params) })
	remove()
	if _, err := client.OpenAgent(ctx, OpenParams{AgentID: "root"}); err != nil {
		t.Fatal(err)
	}
	turnID, err := client.BeginTurn(ctx, TurnBeginParams{AgentID: "root", Messages: []string{"hi"}})
	if err != nil {
		t.Fatal(err)
	}
	output := "bye"
	if err := client.EndTurn(ctx, TurnEndParams{AgentID: "root", TurnID: turnID, Reason: ReasonCompleted, Output: &output}); err != nil {
		t.Fatal(err)
	}
	if err := client.EndTurn(ctx, TurnEndParams{AgentID: "root", TurnID: turnID, Reason: ReasonCompleted}); !errors.As(err, &rpcErr) || rpcErr.Code != CodeInvalidState {
		t.Fatalf("second turns/end: %v", err)
	}
	if err := client.Ping(ctx); err != nil { // the notifications before this reply are dispatched
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		got := strings.Join(statuses, ", ")
		mu.Unlock()
		if got == "root idle, root running, root idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent/status in order: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(removed) != 0 {
		t.Fatalf("a removed handler was called: %q", <-removed)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := client.Ping(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
	if code, err := client.Close(0); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
	if err := client.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestStartFailsLoudlyWithoutTheExecutable(t *testing.T) {
	_, err := Start(Options{Command: "/nonexistent/subagentd"})
	if err == nil || !strings.Contains(err.Error(), "could not run subagentd") {
		t.Fatalf("got %v", err)
	}
}

func TestErrorCodesMatchTheOpenRPCDocument(t *testing.T) {
	data, err := os.ReadFile("../openrpc.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Errors map[string]struct {
				Code int `json:"code"`
			} `json:"errors"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	ours := map[string]int{
		"PARSE_ERROR": CodeParseError, "INVALID_REQUEST": CodeInvalidRequest,
		"METHOD_NOT_FOUND": CodeMethodNotFound, "INVALID_PARAMS": CodeInvalidParams,
		"INTERNAL_ERROR": CodeInternalError, "NOT_INITIALIZED": CodeNotInitialized,
		"REQUEST_CANCELLED": CodeRequestCancelled, "UNSUPPORTED_PROTOCOL_VERSION": CodeUnsupportedProtocolVersion,
		"UNAUTHORIZED": CodeUnauthorized, "NOT_RESUMABLE": CodeNotResumable, "DRAINING": CodeDraining,
		"PARENT_UNAVAILABLE": CodeParentUnavailable, "ACTIVATION_CLOSING": CodeActivationClosing,
		"DUPLICATE_CHILD": CodeDuplicateChild, "DEPTH_EXCEEDED": CodeDepthExceeded,
		"IDEMPOTENCY_CONFLICT": CodeIdempotencyConflict, "UNKNOWN_AGENT": CodeUnknownAgent,
		"INVALID_STATE": CodeInvalidState, "OVERLOADED": CodeOverloaded,
		"STORAGE_FAILED": CodeStorageFailed, "DATABASE_LOST": CodeDatabaseLost,
		"LEASE_LOST": CodeLeaseLost, "MISSING_REQUIRED_CLIENT_CAPABILITY": CodeMissingRequiredClientCapability,
	}
	if len(doc.Components.Errors) != len(ours) {
		t.Fatalf("the document has %d codes, the client %d", len(doc.Components.Errors), len(ours))
	}
	for name, e := range doc.Components.Errors {
		if code, ok := ours[name]; !ok || code != e.Code {
			t.Errorf("%s: document %d, client %d (known: %v)", name, e.Code, code, ok)
		}
	}
}
