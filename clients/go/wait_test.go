package subagentd

import (
	"reflect"
	"testing"
)

func TestWaitIdleAnswersWhenTheTreeIsQuiet(t *testing.T) {
	client, logs := startServer(t, Options{})
	ctx := bounded(t)
	initialize(ctx, t, client)
	starts := make(chan TurnStart, 8)
	client.OnTurnStart(func(s TurnStart) { starts <- s })
	rootWithChild(ctx, t, client, "l", "p")
	c1 := <-starts
	busy, err := client.WaitIdle(ctx, "root", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(busy, WaitIdleResult{Idle: false, Running: []string{"c1"}}) {
		t.Fatalf("busy: %+v", busy)
	}
	quiet := make(chan WaitIdleResult, 1)
	failed := make(chan error, 1)
	go func() {
		r, err := client.WaitIdle(ctx, "root", 600000)
		if err != nil {
			failed <- err
			return
		}
		quiet <- r
	}()
	if err := client.EndTurn(ctx, TurnEndParams{AgentID: "c1", TurnID: c1.TurnID, Reason: ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	root := <-starts // c1 settled: the root runs its notice
	if root.AgentID != "root" {
		t.Fatalf("expected the root's turn, got %+v", root)
	}
	select {
	case r := <-quiet:
		t.Fatalf("answered while the root runs: %+v", r)
	default:
	}
	if err := client.EndTurn(ctx, TurnEndParams{AgentID: "root", TurnID: root.TurnID, Reason: ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-quiet:
		if !reflect.DeepEqual(r, WaitIdleResult{Idle: true}) {
			t.Fatalf("quiet: %+v", r)
		}
	case err := <-failed:
		t.Fatal(err, logs.String())
	case <-ctx.Done():
		t.Fatal("no answer", logs.String())
	}
}
