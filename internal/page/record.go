package page

import (
	"context"
	"html/template"
	"net/http"

	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// recordView is how the page serves one kind's record (a restart or a fleet): its page, and
// the stream that keeps the page's live part current. Both kinds are served by this one
// code; a view says only how its records are found, listed, titled and shown.
type recordView[R any] struct {
	s    *server
	kind *kind
	// page is the record's page; live names its live part, which the stream re-renders.
	page *template.Template
	live string
	// find reads the record by ID or unique prefix; listed is the record as the Source's
	// latest listing holds it, which the stream follows (each change of the records wakes
	// the page's streams).
	find   func(ctx context.Context, idOrPrefix string) (R, error)
	listed func(ctx context.Context, ns, id string) (R, error)
	head   func(R) steer.Head
	// title is the page's title (without the product's name); data the live part's data.
	title func(R) string
	data  func(R) any
}

// serve writes the record's page.
func (v recordView[R]) serve(w http.ResponseWriter, r *http.Request) {
	rec, ok := lookup(w, r, v.kind, v.find)
	if !ok {
		return
	}
	h := v.head(rec)
	render(w, v.page, frame{
		Title:  v.title(rec) + " - nomad-restart",
		Holder: v.s.src.Holder(), Stream: "/" + string(v.kind.name) + "/" + h.ID + "/events",
		Status: string(h.Status), Question: questionText(h),
		Actions: v.kind.actionsView(h.ID), Live: v.data(rec),
	})
}

// serveEvents streams the record's live part, from the Source's listing.
func (v recordView[R]) serveEvents(w http.ResponseWriter, r *http.Request) {
	rec, ok := lookup(w, r, v.kind, v.find)
	if !ok {
		return
	}
	h := v.head(rec)
	v.s.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		cur, err := v.listed(ctx, h.Namespace, h.ID)
		if err != nil {
			return liveUpdate{}, err
		}
		html, err := renderString(v.page, v.live, v.data(cur))
		ch := v.head(cur)
		return liveUpdate{HTML: html, Status: string(ch.Status), Question: questionText(ch)}, err
	})
}
