package subagentdtest_test

import (
	"context"
	"os"
	"testing"

	subagentd "github.com/subagentd/subagentd/clients/go"
	"github.com/subagentd/subagentd/clients/go/subagentdtest"
)

// A host's test: the coordinator spawns a researcher; the scripted host plays both models.
func TestScriptedHostExample(t *testing.T) {
	client := subagentdtest.Serve(t, subagentd.Options{Command: os.Getenv("SUBAGENTD")})
	ctx := context.Background()
	if _, err := client.OpenAgent(ctx, subagentd.OpenParams{AgentID: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Spawn(ctx, subagentd.SpawnParams{Caller: "root", ChildID: "c1", Label: "researcher", Prompt: "Find X."}); err != nil {
		t.Fatal(err)
	}
	host := subagentdtest.NewScriptedHost(client, map[string][]subagentdtest.Reply{
		"c1":   {subagentdtest.Say("X is 42.")},
		"root": {subagentdtest.Say("thanks")},
	})
	turns, err := host.RunUntilIdle(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 || turns[0].AgentID != "c1" || turns[1].AgentID != "root" || turns[1].Output != "thanks" {
		t.Fatalf("turns: %+v", turns)
	}
	want := []string{"Background subagent c1 finished and will do no further work unless you send it more.", "Its closing message:", "X is 42."}
	if got := turns[1].Texts; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("the root's input: %q", got)
	}
	// agent/settled came while the host ran turns: WaitFor still finds it
	settled, err := client.WaitFor(ctx, "agent/settled", map[string]any{"agent_id": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if string(settled) != `{"agent_id":"c1","reason":"completed"}` {
		t.Fatalf("settled: %s", settled)
	}
}
