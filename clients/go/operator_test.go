package subagentd

import "testing"

func TestDiscoverAndStatsAgainstTheRealServer(t *testing.T) {
	client, logs := startServer(t, Options{})
	ctx := bounded(t)
	found, err := client.Discover(ctx)
	if err != nil {
		t.Fatal(err, logs.String())
	}
	if found.ServerInfo.Name != "subagentd" || len(found.SupportedVersions) == 0 || found.ResultType != "complete" {
		t.Fatalf("discover: %+v", found)
	}
	initialize(ctx, t, client)
	rootWithChild(ctx, t, client, "l", "p")
	stats, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err, logs.String())
	}
	// root idle (its turn was never started by a host here: it is live, between turns), c1 running
	if stats.Sessions.Running != 1 || stats.Sessions.Idle != 1 || stats.Sessions.Ready != 0 {
		t.Fatalf("sessions: %+v", stats.Sessions)
	}
	if stats.LiveAgents != 2 || stats.LiveHere == nil || *stats.LiveHere != 2 {
		t.Fatalf("live: %d here %v", stats.LiveAgents, stats.LiveHere)
	}
	if stats.Commits == nil || *stats.Commits < 1 || stats.CommitLatency == nil || stats.DatabaseBytes <= 0 {
		t.Fatalf("figures: %+v", stats)
	}
}
