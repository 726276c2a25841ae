package subagentd

// Message is one inbox message as turn/start and agent/inject carry it (PROTOCOL.md §6).
type Message struct {
	MessageID string      `json:"message_id"`
	Content   []TextBlock `json:"content"`
	Source    Source      `json:"source"`
}

// TextBlock is a content block: {"type": "text", "text": ...}.
type TextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Source says who a message comes from; authority never derives from it.
type Source struct {
	Kind            string `json:"kind"`
	Form            string `json:"form"`
	SenderSessionID string `json:"sender_session_id,omitempty"`
	Summary         string `json:"summary,omitempty"`
}
