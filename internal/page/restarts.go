package page

import (
	"context"
	"fmt"
	"net/http"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// restartKind is how the page finds, steers and words restarts.
var restartKind = &kind{
	name:     steer.KindRestart,
	notFound: store.ErrNotFound,
	find:     findHead(Source.Restart, steer.RestartHead),
	idArg:    "<id>",
	done: map[string]string{
		"pause":  "Pause requested: the batch in flight finishes, then the restart holds.",
		"resume": "Resume requested: its driver continues it (or an agent adopts it).",
		"cancel": "Cancel requested: no more allocations will be restarted.",
		"answer": "Answer recorded.",
	},
	withStatus: true,
	answerHint: "yes, no or a wait like 30s",
}

type listRow struct {
	Rec      *restart.Record
	Progress restart.Progress
	Percent  int
}

type listLive struct {
	Rows  []listRow
	Error string
	// Fleets are shown above the restarts when there are any (fleets.go).
	Fleets      []fleetRow
	FleetsError string
}

func (s *server) listData(ctx context.Context) listLive {
	recs, err := s.src.Restarts(ctx)
	var data listLive
	if err != nil {
		data.Error = err.Error()
	}
	now := s.src.Now()
	for _, rec := range recs {
		p := rec.Progress(now)
		data.Rows = append(data.Rows, listRow{Rec: rec, Progress: p, Percent: percent(p)})
	}
	data.Fleets, data.FleetsError = s.fleetRows()
	return data
}

func (s *server) serveList(w http.ResponseWriter, r *http.Request) {
	render(w, listPage, frame{Title: "Restarts - nomad-restart", Holder: s.src.Holder(), Stream: "/events", Live: s.listData(r.Context())})
}

func (s *server) serveListEvents(w http.ResponseWriter, r *http.Request) {
	s.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		html, err := renderString(listPage, "listLive", s.listData(ctx))
		return liveUpdate{HTML: html}, err
	})
}

type restartLive struct {
	Rec      *restart.Record
	Progress restart.Progress
	Percent  int
	Timeline timeline
}

func (s *server) restartData(rec *restart.Record) restartLive {
	now := s.src.Now()
	p := rec.Progress(now)
	return restartLive{Rec: rec, Progress: p, Percent: percent(p), Timeline: buildTimeline(rec, now)}
}

// restartView is how the page serves a restart's page and its live stream.
func (s *server) restartView() recordView[*restart.Record] {
	return recordView[*restart.Record]{
		s: s, kind: restartKind, page: restartPage, live: "restartLive",
		find: s.src.Restart, listed: s.listedRestart, head: steer.RestartHead,
		title: func(rec *restart.Record) string { return fmt.Sprintf("Restart %s of %s", short(rec.ID), rec.JobID) },
		data:  func(rec *restart.Record) any { return s.restartData(rec) },
	}
}

// listedRestart returns restart id of namespace ns as the Source last listed it (what the
// live page shows), or store.ErrNotFound once it is gone.
func (s *server) listedRestart(ctx context.Context, ns, id string) (*restart.Record, error) {
	recs, err := s.src.Restarts(ctx)
	for _, r := range recs {
		if r.Namespace == ns && r.ID == id {
			return r, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("restart %s: %w (it was deleted, or the agent may no longer read it)", short(id), store.ErrNotFound)
}

func percent(p restart.Progress) int {
	if p.Total == 0 {
		return 100
	}
	return (p.Done + p.Failed + p.Skipped) * 100 / p.Total
}
