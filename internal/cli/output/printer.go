// Package output is how the command line writes, as Nomad's does: timestamped lines with
// a progress line redrawn below them on a terminal, Nomad's timestamps and short IDs,
// one-line errors, tables, and the -json documents with their format's version.
package output

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TimestampPrefixLen is the width of "==> <RFC3339>: ", which continuation lines of a
// header are indented by, as in Nomad's command (jobRestartTimestampPrefixLength).
const TimestampPrefixLen = 31

// uuidRe finds full IDs (allocations, evaluations, restarts) inside event messages, which
// the engine writes with full IDs so that the CLI can shorten them unless -verbose.
var uuidRe = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)

// Printer writes Nomad-style lines, and on a terminal keeps a progress line redrawn in place
// below them. It is safe for concurrent use.
type Printer struct {
	mu sync.Mutex
	// Out is where the lines go.
	Out io.Writer
	// TTY redraws a progress line in place below the lines.
	TTY bool
	// Width is the terminal's width; 0 if unknown.
	Width int
	// Verbose keeps full IDs; JSON prints events as JSON lines and shows no progress.
	Verbose bool
	JSON    bool

	progress string // the progress line currently drawn, "" when none
}

// IDs shortens the full IDs found in s unless verbose.
func (p *Printer) IDs(s string) string {
	if p.Verbose {
		return s
	}
	return uuidRe.ReplaceAllStringFunc(s, func(id string) string { return id[:8] })
}

// Header prints "==> <ts>: msg", continuation lines indented under the message.
func (p *Printer) Header(t time.Time, msg string) {
	p.Line(fmt.Sprintf("==> %s: %s", FormatTime(t), Indent(p.IDs(msg), TimestampPrefixLen)))
}

// Detail prints "    <ts>: msg", the per-allocation lines.
func (p *Printer) Detail(t time.Time, msg string) {
	p.Line(fmt.Sprintf("    %s: %s", FormatTime(t), Indent(p.IDs(msg), TimestampPrefixLen)))
}

// Plain prints text as is.
func (p *Printer) Plain(text string) { p.Line(text) }

// Line writes one line (or several), keeping the progress line below the text.
func (p *Printer) Line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.TTY && p.progress != "" {
		fmt.Fprint(p.Out, "\r\x1b[2K")
	}
	fmt.Fprintln(p.Out, s)
	if p.TTY && p.progress != "" {
		fmt.Fprint(p.Out, p.progress)
	}
}

// JSONLine writes v as one line of JSON.
func (p *Printer) JSONLine(v any) {
	b, err := Marshal(v)
	if err != nil {
		// Records and events are plain data; a failure here is a bug worth seeing.
		b = []byte(fmt.Sprintf(`{"Error":%q}`, err.Error()))
	}
	p.Line(string(b))
}

// SetProgress redraws the progress line (terminals only).
func (p *Printer) SetProgress(s string) {
	if !p.ShowsProgress() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Width > 4 && len(s) >= p.Width {
		s = s[:p.Width-1]
	}
	fmt.Fprint(p.Out, "\r\x1b[2K"+s)
	p.progress = s
}

// ShowsProgress reports whether the live progress line is shown (on a terminal, without
// -json): callers skip rendering it otherwise.
func (p *Printer) ShowsProgress() bool { return p.TTY && !p.JSON }

// ClearProgress removes the progress line, before a prompt or at the end.
func (p *Printer) ClearProgress() {
	if !p.TTY {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.progress != "" {
		fmt.Fprint(p.Out, "\r\x1b[2K")
		p.progress = ""
	}
}

// Event prints one event of a restart: JSON, a header (restart-wide) or a detail line
// (about one allocation).
func (p *Printer) Event(ev restart.Event) {
	if p.JSON {
		p.JSONLine(ev)
		return
	}
	if ev.AllocID != "" {
		p.Detail(ev.Time, ev.Message)
		return
	}
	p.Header(ev.Time, ev.Message)
}

// Indent indents every line of s but the first by n spaces.
func Indent(s string, n int) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	pad := strings.Repeat(" ", n)
	return strings.ReplaceAll(s, "\n", "\n"+pad)
}
