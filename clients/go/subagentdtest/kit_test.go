package subagentdtest_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	subagentd "github.com/subagentd/subagentd/clients/go"
	"github.com/subagentd/subagentd/clients/go/subagentdtest"
)

func served(t *testing.T) (*subagentd.Client, context.Context) {
	client := subagentdtest.Serve(t, subagentd.Options{Command: os.Getenv("SUBAGENTD")})
	ctx := context.Background()
	if _, err := client.OpenAgent(ctx, subagentd.OpenParams{AgentID: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Spawn(ctx, subagentd.SpawnParams{Caller: "root", ChildID: "c1", Label: "w", Prompt: "go"}); err != nil {
		t.Fatal(err)
	}
	return client, ctx
}

func TestWaitForMatchesANotificationReceivedBeforeItOnce(t *testing.T) {
	client, ctx := served(t)
	if err := client.Ping(ctx); err != nil { // replies come in order: turn/start has arrived
		t.Fatal(err)
	}
	start, err := client.WaitFor(ctx, "turn/start", map[string]any{"agent_id": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = client.WaitFor(short, "turn/start", map[string]any{"agent_id": "c1"})
	if err == nil {
		t.Fatal("the same turn/start was returned twice")
	}
	prefix := `no turn/start notification matching {"agent_id":"c1"} within `
	suffix := "; the turn/start notifications received:\n  " + string(start) + " (taken)"
	if !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Fatalf("error: %v", err)
	}
	// end c1's turn and the root's notice so the server is idle at the end
	host := subagentdtest.NewScriptedHost(client, map[string][]subagentdtest.Reply{"root": {subagentdtest.Say("ok")}})
	var taken struct {
		TurnID string `json:"turn_id"`
	}
	if err := json.Unmarshal(start, &taken); err != nil {
		t.Fatal(err)
	}
	if err := client.EndTurn(ctx, subagentd.TurnEndParams{AgentID: "c1", TurnID: taken.TurnID, Reason: "completed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.RunUntilIdle(ctx, "root"); err != nil {
		t.Fatal(err)
	}
}

func TestATurnWithoutAReplyFailsNamingTheAgentAndItsTurn(t *testing.T) {
	client, ctx := served(t)
	host := subagentdtest.NewScriptedHost(client, map[string][]subagentdtest.Reply{"c1": {subagentdtest.Say("first")}})
	_, err := host.RunUntilIdle(ctx, "root")
	want := `scripted host: agent "root" started its turn 1, but the table has 0 replies for it; the turn's input: ["`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error: %v", err)
	}
	idle, err := client.WaitIdle(ctx, "root", 5000)
	if err != nil || !idle.Idle {
		t.Fatalf("not idle after the failed turn was ended: %+v %v", idle, err)
	}
}

func TestRepliesMayCallToolsBeforeTheyEndTheTurn(t *testing.T) {
	client, ctx := served(t)
	report := func(ctx context.Context, start subagentd.TurnStart) (subagentd.TurnOutcome, error) {
		_, err := client.Report(ctx, subagentd.ReportParams{Caller: start.AgentID, Output: "half way"})
		return subagentd.TurnOutcome{Output: "all done"}, err
	}
	host := subagentdtest.NewScriptedHost(client, map[string][]subagentdtest.Reply{
		"c1":   {report},
		"root": {subagentdtest.Say("r1"), subagentdtest.Say("r2")},
	})
	turns, err := host.RunUntilIdle(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	var agents []string
	for _, turn := range turns {
		agents = append(agents, turn.AgentID)
	}
	if strings.Join(agents, ",") != "c1,root,root" {
		t.Fatalf("turns of %v", agents)
	}
	if left := host.Left(); left["c1"] != 0 || left["root"] != 0 {
		t.Fatalf("left: %v", left)
	}
}
