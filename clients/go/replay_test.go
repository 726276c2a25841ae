package subagentd

// Replays the scripted transcripts in tests/scripts/*.jsonl (the format is
// docs/scripts.md) against a real subagentd, exactly as the Python and Node suites do:
// placeholders, a closing ping with id "script-end", nothing unexpected, exit code 0.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const endID = "script-end"

var (
	scriptsDir = filepath.Join("..", "..", "tests", "scripts")
	whole      = regexp.MustCompile(`^\$\{([A-Za-z0-9_]+)\}$`)
	stepKeys   = []string{"send", "send_raw", "expect", "comment", "version"}
)

type step struct {
	kind  string // send, send_raw, expect, comment or version (docs/scripts.md)
	value any
	line  int
}

// decode parses JSON keeping numbers as written (json.Number).
func decode(data []byte) (any, error) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var v any
	if err := decoder.Decode(&v); err != nil {
		return nil, err
	}
	if decoder.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func parseScript(text string) ([]step, error) {
	var steps []step
	for i, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		v, err := decode([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: not JSON: %v", i+1, err)
		}
		object, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("line %d: a step must be an object", i+1)
		}
		var key string
		for k := range object {
			key = k
		}
		known := false
		for _, k := range stepKeys {
			known = known || k == key
		}
		if len(object) != 1 || !known {
			return nil, fmt.Errorf("line %d: a step has exactly one of %s: %s", i+1, strings.Join(stepKeys, ", "), line)
		}
		if _, isString := object[key].(string); key == "send_raw" && !isString {
			return nil, fmt.Errorf("line %d: send_raw takes a string", i+1)
		}
		if key == "version" && (len(steps) > 0 || show(object[key]) != "1") {
			return nil, fmt.Errorf("line %d: version 1 is the first step only: %s", i+1, line)
		}
		steps = append(steps, step{kind: key, value: object[key], line: i + 1})
	}
	return steps, nil
}

func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(data)
}

// bindings are the values captured by "${name}" placeholders.
type bindings map[string]any

func numbersEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	x, errA := strconv.ParseFloat(string(a), 64)
	y, errB := strconv.ParseFloat(string(b), 64)
	return errA == nil && errB == nil && x == y
}

// equal is structural JSON equality (numbers by value, as JavaScript compares them).
func equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numbersEqual(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, present := y[k]
			if !present || !equal(v, w) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(a, b)
	}
}

// match checks actual against expected, capturing placeholders; it returns the first mismatch
// as "<path>: <problem>", or "".
func (b bindings) match(expected, actual any, path string) string {
	switch e := expected.(type) {
	case string:
		if m := whole.FindStringSubmatch(e); m != nil {
			name := m[1]
			if name == "_" {
				return ""
			}
			recorded, ok := b[name]
			if !ok {
				b[name] = actual
				return ""
			}
			if equal(recorded, actual) {
				return ""
			}
			return fmt.Sprintf("%s: expected ${%s} = %s, got %s", path, name, show(recorded), show(actual))
		}
		if a, ok := actual.(string); ok && a == e {
			return ""
		}
	case []any:
		a, ok := actual.([]any)
		if !ok {
			return fmt.Sprintf("%s: expected an array, got %s", path, show(actual))
		}
		if len(e) != len(a) {
			return fmt.Sprintf("%s: expected %d items, got %d: %s", path, len(e), len(a), show(actual))
		}
		for i := range e {
			if problem := b.match(e[i], a[i], fmt.Sprintf("%s[%d]", path, i)); problem != "" {
				return problem
			}
		}
		return ""
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %s", path, show(actual))
		}
		var extra []string
		for k := range a {
			if _, ok := e[k]; !ok {
				extra = append(extra, strconv.Quote(k))
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			return fmt.Sprintf("%s: unexpected %s in %s", path, strings.Join(extra, ", "), show(actual))
		}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, present := a[k]
			if !present {
				return fmt.Sprintf("%s: missing %s in %s", path, strconv.Quote(k), show(actual))
			}
			if problem := b.match(e[k], v, path+"."+k); problem != "" {
				return problem
			}
		}
		return ""
	default:
		if equal(expected, actual) {
			return ""
		}
	}
	return fmt.Sprintf("%s: expected %s, got %s", path, show(expected), show(actual))
}

// substitute replaces whole "${name}" strings (anywhere but in keys) by their recorded values.
func (b bindings) substitute(value any) (any, error) {
	switch v := value.(type) {
	case string:
		m := whole.FindStringSubmatch(v)
		if m == nil {
			return v, nil
		}
		recorded, ok := b[m[1]]
		if !ok || m[1] == "_" {
			return nil, fmt.Errorf("${%s} is used before it was recorded", m[1])
		}
		return recorded, nil
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			s, err := b.substitute(item)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			s, err := b.substitute(item)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	return value, nil
}

// frameQueue holds the frames the server wrote, in arrival order.
type frameQueue struct {
	frames  chan json.RawMessage
	problem chan string
}

func newFrameQueue() *frameQueue {
	return &frameQueue{frames: make(chan json.RawMessage, 1<<14), problem: make(chan string, 2)}
}

func (q *frameQueue) options() Options {
	return Options{
		OnFrame: func(frame json.RawMessage) {
			select {
			case q.frames <- frame:
			default:
				q.report("more unread frames than the replayer buffers")
			}
		},
		OnProtocolError: func(err error, line []byte) {
			q.report(fmt.Sprintf("the server wrote a line that is not a JSON frame (%v): %s", err, line))
		},
	}
}

func (q *frameQueue) report(problem string) {
	select {
	case q.problem <- problem:
	default:
	}
}

func (q *frameQueue) next(client *Client, timeout time.Duration) (any, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case frame := <-q.frames:
		return decode(frame)
	case problem := <-q.problem:
		return nil, errors.New(problem)
	case <-timer.C:
		return nil, fmt.Errorf("no frame within %v", timeout)
	case <-client.Exited():
		select {
		case frame := <-q.frames: // frames written before the exit still count
			return decode(frame)
		default:
			return nil, fmt.Errorf("the server exited (code %d)", client.exitCode)
		}
	}
}

// replay runs the steps against client; the first mismatch is an error naming its step.
func replay(client *Client, q *frameQueue, steps []step, timeout, quiet time.Duration) (bindings, error) {
	b := bindings{}
	for i, s := range steps {
		where := fmt.Sprintf("step %d (line %d)", i+1, s.line)
		switch s.kind {
		case "send":
			frame, err := b.substitute(s.value)
			if err != nil {
				return b, fmt.Errorf("%s: %v", where, err)
			}
			if err := client.SendFrame(frame); err != nil {
				return b, fmt.Errorf("%s: %v", where, err)
			}
		case "send_raw":
			if err := client.SendRaw(s.value.(string)); err != nil {
				return b, fmt.Errorf("%s: %v", where, err)
			}
		case "expect":
			frame, err := q.next(client, timeout)
			if err != nil {
				return b, fmt.Errorf("%s: expected %s, but %v", where, show(s.value), err)
			}
			if problem := b.match(s.value, frame, "$"); problem != "" {
				return b, fmt.Errorf("%s: %s\n  expected: %s\n  actual:   %s", where, problem, show(s.value), show(frame))
			}
		}
	}
	// The end: everything the server sent must have been expected.
	if err := client.SendFrame(map[string]any{"jsonrpc": "2.0", "id": endID, "method": "ping"}); err != nil {
		return b, fmt.Errorf("after the last step: %v", err)
	}
	endReply := map[string]any{"jsonrpc": "2.0", "result": map[string]any{}, "id": endID}
	frame, err := q.next(client, timeout)
	if err != nil {
		return b, fmt.Errorf("after the last step: no reply to the closing ping (%v)", err)
	}
	if !equal(frame, endReply) {
		return b, fmt.Errorf("after the last step: unexpected frame %s", show(frame))
	}
	if late, err := q.next(client, quiet); err == nil {
		return b, fmt.Errorf("after the last step: unexpected frame %s", show(late))
	}
	return b, nil
}

func scriptFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(scriptsDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripted transcripts in %s", scriptsDir)
	}
	sort.Strings(files)
	return files
}

func TestScriptedTranscripts(t *testing.T) {
	for _, file := range scriptFiles(t) {
		file := file
		t.Run(filepath.Base(file), func(t *testing.T) {
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			steps, err := parseScript(string(text))
			if err != nil {
				t.Fatal(err)
			}
			q := newFrameQueue()
			client, logs := startServer(t, q.options())
			if _, err := replay(client, q, steps, 20*time.Second, 300*time.Millisecond); err != nil {
				t.Fatalf("%v\n--- server stderr ---\n%s", err, logs)
			}
			code, err := client.Close(0)
			if err != nil || code != 0 {
				t.Fatalf("exit code %d (%v)\n--- server stderr ---\n%s", code, err, logs)
			}
		})
	}
}

func TestReplayerCapturesSubstitutesAndComparesExactly(t *testing.T) {
	script := strings.Join([]string{
		`{"comment": "a self-test of the replayer"}`,
		``,
		`{"send": {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}}`,
		`{"expect": {"jsonrpc": "2.0", "id": 1, "result": "${init}"}}`,
		`{"send": {"jsonrpc": "2.0", "method": "notifications/initialized"}}`,
		`{"send": {"jsonrpc": "2.0", "id": 2, "method": "agents/open", "params": {"agent_id": "root"}}}`,
		`{"expect": {"jsonrpc": "2.0", "id": 2, "result": {"agent_id": "root", "activation_id": "${act}"}}}`,
		`{"send": {"jsonrpc": "2.0", "id": 3, "method": "list_agents", "params": {"caller": "root", "activation": "${act}"}}}`,
		`{"expect": {"jsonrpc": "2.0", "id": 3, "result": {"text": "(no subagents)", "agents": []}}}`,
		`{"send_raw": "[{\"jsonrpc\": \"2.0\", \"id\": 4, \"method\": \"ping\"}, {\"jsonrpc\": \"2.0\", \"method\": \"ping\"}]"}`,
		`{"expect": [{"jsonrpc": "2.0", "id": 4, "result": {}}]}`,
		`{"send_raw": "{oops"}`,
		`{"expect": {"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "${_}", "data": "${_}"}}}`,
	}, "\n")
	steps, err := parseScript(script)
	if err != nil {
		t.Fatal(err)
	}
	q := newFrameQueue()
	client, logs := startServer(t, q.options())
	b, err := replay(client, q, steps, 20*time.Second, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	if _, ok := b["act"].(string); !ok {
		t.Fatalf("act not captured as a string: %#v", b["act"])
	}
	if name := b["init"].(map[string]any)["serverInfo"].(map[string]any)["name"]; name != "subagentd" {
		t.Fatalf("serverInfo.name = %v", name)
	}
	if code, err := client.Close(0); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
}

func TestReplayerMismatchesNameThePath(t *testing.T) {
	b := bindings{}
	mustDecode := func(s string) any {
		v, err := decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct{ expected, actual, problem string }{
		{`{"a": [1, "${x}"]}`, `{"a": [1, "v"]}`, ``},
		{`{"a": [1, "${x}"]}`, `{"a": [1, "w"]}`, `$.a[1]: expected ${x} = "v", got "w"`},
		{`{"a": 1}`, `{"a": 1, "b": 2}`, `$: unexpected "b" in {"a":1,"b":2}`},
		{`{"a": 1, "b": 2}`, `{"a": 1}`, `$: missing "b" in {"a":1}`},
		{`"${_}"`, `{"anything": true}`, ``},
		{`1`, `true`, `$: expected 1, got true`},
		{`"1"`, `1`, `$: expected "1", got 1`},
		{`1`, `1.0`, ``},
		{`[1]`, `[1, 2]`, `$: expected 1 items, got 2: [1,2]`},
		{`null`, `{}`, `$: expected null, got {}`},
	}
	for _, c := range cases {
		if got := b.match(mustDecode(c.expected), mustDecode(c.actual), "$"); got != c.problem {
			t.Errorf("match(%s, %s) = %q, want %q", c.expected, c.actual, got, c.problem)
		}
	}
	sent, err := b.substitute(mustDecode(`{"id": "${x}", "text": "to ${x}!", "${x}": 1}`))
	if err != nil || show(sent) != `{"${x}":1,"id":"v","text":"to ${x}!"}` {
		t.Fatalf("substitute = %s, %v", show(sent), err)
	}
	if _, err := b.substitute("${nothing}"); err == nil || !strings.Contains(err.Error(), "before it was recorded") {
		t.Fatalf("substitute of an unrecorded name: %v", err)
	}
	for _, bad := range []string{`{"send": 1, "comment": "two keys"}`, `{"sleep": 1}`, `[1]`, `{"send_raw": 1}`} {
		if _, err := parseScript(bad); err == nil {
			t.Errorf("parseScript(%s) succeeded", bad)
		}
	}
}

func TestReplayerFailsOnWhatTheScriptDidNotExpect(t *testing.T) {
	steps, err := parseScript(`{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}`)
	if err != nil {
		t.Fatal(err)
	}
	q := newFrameQueue()
	client, _ := startServer(t, q.options())
	_, err = replay(client, q, steps, 20*time.Second, 300*time.Millisecond)
	want := `after the last step: unexpected frame {"id":1,"jsonrpc":"2.0","result":{}}`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}

	steps, err = parseScript(`{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}` + "\n" +
		`{"expect": {"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}}`)
	if err != nil {
		t.Fatal(err)
	}
	q = newFrameQueue()
	client, _ = startServer(t, q.options())
	_, err = replay(client, q, steps, 20*time.Second, 300*time.Millisecond)
	if err == nil || !strings.HasPrefix(err.Error(), `step 2 (line 2): $.result: missing "x"`) {
		t.Fatalf("got %v", err)
	}
}
