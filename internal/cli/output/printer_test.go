package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

const fullAlloc = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"

func TestPrinterEvent(t *testing.T) {
	ts := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name    string
		verbose bool
		json    bool
		ev      restart.Event
		want    string
	}{
		{"header shortens IDs", false, false,
			restart.Event{Time: ts, Type: restart.EventBatchStarted, Message: "Restarting 1st batch of 3 allocations"},
			"==> " + FormatTime(ts) + ": Restarting 1st batch of 3 allocations\n"},
		{"alloc line indented with 8-char ID", false, false,
			restart.Event{Time: ts, Type: restart.EventAllocRestart, AllocID: fullAlloc, Message: `Restarting running tasks in allocation "` + fullAlloc + `" for group "web"`},
			"    " + FormatTime(ts) + `: Restarting running tasks in allocation "0f1e2d3c" for group "web"` + "\n"},
		{"verbose keeps full IDs", true, false,
			restart.Event{Time: ts, Type: restart.EventAllocRestart, AllocID: fullAlloc, Message: `allocation "` + fullAlloc + `"`},
			"    " + FormatTime(ts) + `: allocation "` + fullAlloc + `"` + "\n"},
		{"continuation lines indented 31", false, false,
			restart.Event{Time: ts, Type: restart.EventWarning, Message: "one\ntwo"},
			"==> " + FormatTime(ts) + ": one\n" + strings.Repeat(" ", 31) + "two\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Verbose: tc.verbose, JSON: tc.json}
			p.Event(tc.ev)
			if b.String() != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
}

func TestPrinterJSONEventIsOneLine(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, JSON: true}
	ev := restart.Event{Seq: 3, Time: time.Now(), Type: restart.EventAllocDone, AllocID: fullAlloc, Message: "a\nb"}
	p.Event(ev)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %q", b.String())
	}
	var got restart.Event
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Seq != 3 || got.AllocID != fullAlloc || got.Type != restart.EventAllocDone {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestPrinterProgressRedrawnBelowLines(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, TTY: true}
	p.SetProgress("batch 1/2")
	p.Plain("hello")
	p.ClearProgress()
	want := "\r\x1b[2Kbatch 1/2" + "\r\x1b[2K" + "hello\n" + "batch 1/2" + "\r\x1b[2K"
	if b.String() != want {
		t.Fatalf("got %q want %q", b.String(), want)
	}
	// Without a terminal no control characters are written.
	b.Reset()
	p = &Printer{Out: &b}
	p.SetProgress("x")
	p.Plain("hello")
	p.ClearProgress()
	if b.String() != "hello\n" {
		t.Fatalf("plain output got %q", b.String())
	}
}
