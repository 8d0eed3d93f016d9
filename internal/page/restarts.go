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

func (s *server) serveRestart(w http.ResponseWriter, r *http.Request) {
	rec, ok := lookup(w, r, restartKind, s.src.Restart)
	if !ok {
		return
	}
	render(w, restartPage, frame{
		Title:  fmt.Sprintf("Restart %s of %s - nomad-restart", short(rec.ID), rec.JobID),
		Holder: s.src.Holder(), Stream: "/restart/" + rec.ID + "/events",
		Status: string(rec.Status), Question: questionText(steer.RestartHead(rec)),
		Actions: restartKind.actionsView(rec.ID), Live: s.restartData(rec),
	})
}

// serveRestartEvents streams one restart's live part, read from the records the Source's
// listing keeps current.
func (s *server) serveRestartEvents(w http.ResponseWriter, r *http.Request) {
	rec, ok := lookup(w, r, restartKind, s.src.Restart)
	if !ok {
		return
	}
	ns, id := rec.Namespace, rec.ID
	s.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		cur, err := s.listedRestart(ctx, ns, id)
		if err != nil {
			return liveUpdate{}, err
		}
		html, err := renderString(restartPage, "restartLive", s.restartData(cur))
		return liveUpdate{HTML: html, Status: string(cur.Status), Question: questionText(steer.RestartHead(cur))}, err
	})
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
