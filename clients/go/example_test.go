package subagentd_test

import (
	"context"
	"fmt"
	"log"
	"os"

	subagentd "github.com/subagentd/subagentd/clients/go"
)

// runModel is where your model goes: this stand-in answers at once so the example runs as it is.
// Its tools map to client.SendMessage, InterruptAgent, ListAgents and Report (each with Caller).
func runModel(ctx context.Context, start subagentd.TurnStart) (string, error) {
	if err := ctx.Err(); err != nil { // stop when subagentd interrupts the turn
		return "", err
	}
	input := subagentd.RenderMessages(start.Messages) // each message fenced with its sender
	return fmt.Sprintf("%s read %d characters", start.AgentID, len(input)), nil
}

// A coordinator spawns a researcher; RunAgentHost runs both agents' turns; the program ends when
// the tree is done. (README.md shows this program.)
func Example() {
	client, err := subagentd.Start(subagentd.Options{
		Command: os.Getenv("SUBAGENTD"), // "" runs `subagentd` from PATH
		DB:      ":memory:",             // a file path keeps the tree across runs
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.Initialize(ctx, subagentd.InitializeParams{}); err != nil {
		log.Fatal(err)
	}
	root, err := client.OpenAgent(ctx, subagentd.OpenParams{AgentID: "root", Label: "coordinator"})
	if err != nil {
		log.Fatal(err)
	}

	host := subagentd.RunAgentHost(client, subagentd.HostOptions{
		// subagentd sends turn/start; the host calls this, then turns/end with what it returns.
		// ctx is cancelled on turn/interrupt (the turn is reported "aborted"); an error is
		// reported "error" with its text as output, and printed to stderr (see OnError).
		Turn: func(ctx context.Context, start subagentd.TurnStart) (subagentd.TurnOutcome, error) {
			answer, err := runModel(ctx, start)
			return subagentd.TurnOutcome{Output: answer}, err
		},
	})

	settled := client.SettledOf("researcher-1") // before the spawn, so it cannot be missed
	child, err := client.Spawn(ctx, subagentd.SpawnParams{
		Caller: root.AgentID, ChildID: "researcher-1", Label: "researcher", Prompt: "Find X.",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(child.Text)
	s := <-settled
	fmt.Println(s.AgentID, s.Reason)

	// Closing the root waits for its turns (the child's notice) and everything below it.
	if err := client.CloseAgent(ctx, root.AgentID); err != nil {
		log.Fatal(err)
	}
	host.Stop()
	code, err := client.Close(0) // ends stdin; subagentd commits and exits
	fmt.Println("exit code", code, err)
	// Output:
	// started subagent researcher-1
	// researcher-1 completed
	// exit code 0 <nil>
}
