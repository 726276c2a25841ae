package subagentd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The shared fixtures (format: docs/rendering.md); Python and TypeScript run the same files.
var fixtures = filepath.Join("..", "..", "tests", "scripts", "render")

type renderCase struct {
	Description string    `json:"description"`
	Seed        *string   `json:"seed"`
	Messages    []Message `json:"messages"`
	Rendered    string    `json:"rendered"`
}

func loadCase(t *testing.T, name string) renderCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	var c renderCase
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

func TestRenderMatchesTheSharedFixtures(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(fixtures, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	for _, path := range names {
		name := filepath.Base(path)
		seen[name] = true
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			c := loadCase(t, name)
			var got string
			if c.Seed == nil {
				got = RenderMessages(c.Messages)
			} else {
				got = RenderMessagesWithSeed(c.Messages, *c.Seed)
			}
			if got != c.Rendered {
				t.Errorf("%s\ngot:\n%s\nwant:\n%s", c.Description, got, c.Rendered)
			}
		})
	}
	for _, name := range []string{"forged-report.json", "fake-fences.json", "token-in-text.json", "lone-surrogates.json"} {
		if !seen[name] {
			t.Errorf("fixture %s is missing from %s", name, fixtures)
		}
	}
}

func TestRenderGuideIsTheSharedText(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtures, "guide.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if RenderGuide+"\n" != string(data) {
		t.Errorf("RenderGuide differs from guide.txt:\n%s", RenderGuide)
	}
}

func TestDefaultTokenIsSha256OfTheRenderWithoutFences(t *testing.T) {
	unfenced := "<message- from=\"parent agent root\" kind=\"task\">\nFind the oldest open bug.\n</message->"
	sum := sha256.Sum256([]byte("0\n" + unfenced))
	token := hex.EncodeToString(sum[:])[:8]
	got := RenderMessages(loadCase(t, "spawn-task.json").Messages)
	want := "<message-" + token + " from=\"parent agent root\" kind=\"task\">\nFind the oldest open bug.\n</message-" + token + ">"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestInvalidUTF8RendersAsReplacementCharacters(t *testing.T) {
	got := RenderMessages([]Message{{Content: []TextBlock{{Type: "text", Text: "a\xffb\xed\xa0\x80c"}}, Source: Source{Kind: "user", Form: "direct"}}})
	lines := strings.Split(got, "\n")
	if len(lines) != 3 || lines[1] != "a\ufffdb\ufffd\ufffd\ufffdc" {
		t.Errorf("got %q", got)
	}
}
