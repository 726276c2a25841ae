package subagentd

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// KeepNotifications is how many notifications a Client keeps for WaitFor (the oldest go first).
const KeepNotifications = 10000

type received struct {
	method string
	params json.RawMessage
	taken  bool
}

// keep files a notification for WaitFor and wakes the waiters.
func (c *Client) keep(method string, params json.RawMessage) {
	c.logMu.Lock()
	c.log = append(c.log, &received{method: method, params: append(json.RawMessage(nil), params...)})
	if len(c.log) > KeepNotifications {
		c.log = c.log[len(c.log)-KeepNotifications:]
	}
	close(c.logWake)
	c.logWake = make(chan struct{})
	c.logMu.Unlock()
}

// WaitFor returns the params of the earliest notification method whose params hold every field
// of match (equal as JSON values; nil matches any) that no earlier WaitFor returned — one
// received before the call included, whatever handlers saw it — else the first such to arrive.
// It gives up when ctx ends (without a deadline: after the client's RequestTimeout) with an
// error naming what of method did arrive.
func (c *Client) WaitFor(ctx context.Context, method string, match map[string]any) (json.RawMessage, error) {
	want, err := normalize(match)
	if err != nil {
		return nil, fmt.Errorf("WaitFor %s: match does not encode: %w", method, err)
	}
	timeout := c.timeout
	if _, has := ctx.Deadline(); !has && timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	began := time.Now()
	for {
		c.logMu.Lock()
		for _, r := range c.log {
			if !r.taken && r.method == method && holds(r.params, want) {
				r.taken = true
				c.logMu.Unlock()
				return r.params, nil
			}
		}
		wake := c.logWake
		c.logMu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, c.missing(method, match, time.Since(began))
		}
	}
}

// Notifications returns the params of every notification kept (of method, unless ""), in order.
func (c *Client) Notifications(method string) []json.RawMessage {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	var out []json.RawMessage
	for _, r := range c.log {
		if method == "" || r.method == method {
			out = append(out, r.params)
		}
	}
	return out
}

func (c *Client) missing(method string, match map[string]any, waited time.Duration) error {
	shown, _ := json.Marshal(match)
	if match == nil {
		shown = []byte("{}")
	}
	said := fmt.Sprintf("no %s notification matching %s within %s", method, shown, waited.Round(time.Millisecond))
	c.logMu.Lock()
	defer c.logMu.Unlock()
	var lines []string
	for _, r := range c.log {
		if r.method == method {
			line := "  " + string(r.params)
			if r.taken {
				line += " (taken)"
			}
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s; no %s notification arrived at all", said, method)
	}
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return fmt.Errorf("%s; the %s notifications received:\n%s", said, method, strings.Join(lines, "\n"))
}

// normalize turns match's values into what encoding/json decodes JSON into (float64, maps...).
func normalize(match map[string]any) (map[string]any, error) {
	if match == nil {
		return nil, nil
	}
	data, err := json.Marshal(match)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = json.Unmarshal(data, &out)
	return out, err
}

func holds(params json.RawMessage, want map[string]any) bool {
	if len(want) == 0 {
		return true
	}
	var got map[string]any
	if json.Unmarshal(params, &got) != nil {
		return false
	}
	for k, v := range want {
		if have, ok := got[k]; !ok || !reflect.DeepEqual(have, v) {
			return false
		}
	}
	return true
}
