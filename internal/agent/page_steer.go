package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Steerer performs the operator's actions on a restart. The page gets one per request from
// Config.Steer, built on the Nomad token the browser sent, so that the page can do nothing
// that token could not do with the CLI. *engine.Engine satisfies it.
type Steerer interface {
	// Plan and Create file a restart, as `nomad-restart run -detach` does.
	Plan(ctx context.Context, req engine.Request) (*engine.Plan, error)
	Create(ctx context.Context, rec *restart.Record) error
	Pause(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Resume(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Cancel(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Answer(ctx context.Context, namespace, id, answer, by string) (*restart.Record, error)
}

// TokenHeader carries the user's Nomad ACL token from the page to the agent, as Nomad's
// own UI sends it to Nomad: never a cookie, never in a URL.
const TokenHeader = "X-Nomad-Token"

// maxActionBody bounds an action's request body (an answer is a few bytes).
const maxActionBody = 4 << 10

// actionResult is the JSON answer to an action: Message on success, Error otherwise.
type actionResult struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	Status  string `json:"status,omitempty"`
}

// pageAction is one thing the page may ask of a restart.
type pageAction struct {
	verb string // as the CLI names it
	do   func(ctx context.Context, s Steerer, rec *restart.Record, answer, by string) (*restart.Record, error)
	done string // what the page says once the intent is stored
}

// pageActionFor is the action the page names, if it offers it.
func pageActionFor(name string) (pageAction, bool) {
	switch name {
	case "pause":
		return pageAction{"pause", func(ctx context.Context, s Steerer, r *restart.Record, _, by string) (*restart.Record, error) {
			return s.Pause(ctx, r.Namespace, r.ID, by)
		}, "Pause requested: the batch in flight finishes, then the restart holds."}, true
	case "resume":
		return pageAction{"resume", func(ctx context.Context, s Steerer, r *restart.Record, _, by string) (*restart.Record, error) {
			return s.Resume(ctx, r.Namespace, r.ID, by)
		}, "Resume requested: its driver continues it (or an agent adopts it)."}, true
	case "cancel":
		return pageAction{"cancel", func(ctx context.Context, s Steerer, r *restart.Record, _, by string) (*restart.Record, error) {
			return s.Cancel(ctx, r.Namespace, r.ID, by)
		}, "Cancel requested: no more allocations will be restarted."}, true
	case "answer":
		return pageAction{"answer", func(ctx context.Context, s Steerer, r *restart.Record, answer, by string) (*restart.Record, error) {
			return s.Answer(ctx, r.Namespace, r.ID, answer, by)
		}, "Answer recorded."}, true
	}
	return pageAction{}, false
}

// serveAction performs one action on a restart with the token of the request. It is
// reached only by POST, through http.CrossOriginProtection (cross-site requests are
// refused before it runs).
func (a *Agent) serveAction(w http.ResponseWriter, r *http.Request) {
	act, ok := pageActionFor(r.PathValue("action"))
	if !ok {
		writeResult(w, http.StatusNotFound, actionResult{Error: fmt.Sprintf("unknown action %q: the page offers pause, resume, cancel and answer", r.PathValue("action"))})
		return
	}
	if a.cfg.Steer == nil {
		writeResult(w, http.StatusNotImplemented, actionResult{Error: "this agent does not steer restarts from its page; use `nomad-restart " + act.verb + " <id>`"})
		return
	}
	var body struct{ Answer string }
	if err := json.NewDecoder(io.LimitReader(r.Body, maxActionBody)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeResult(w, http.StatusBadRequest, actionResult{Error: "the request body is not JSON like {\"Answer\": \"yes\"}: " + err.Error()})
		return
	}
	rec, status, msg := a.actionTarget(r.Context(), r.PathValue("id"), act, body.Answer)
	if msg != "" {
		writeResult(w, status, actionResult{Error: msg})
		return
	}
	st, err := a.cfg.Steer(r.Header.Get(TokenHeader))
	if err != nil {
		writeResult(w, http.StatusBadGateway, actionResult{Error: "connecting to Nomad with your token: " + err.Error()})
		return
	}
	out, err := act.do(r.Context(), st, rec, body.Answer, "page of "+a.cfg.Holder)
	if err != nil {
		status, text := steerFailure(act.verb+" restart "+short(rec.ID), rec.Namespace, err)
		a.log.Info("action from the page refused", "restart", rec.ID, "namespace", rec.Namespace, "action", act.verb, "status", status)
		writeResult(w, status, actionResult{Error: text})
		return
	}
	a.log.Info("action from the page", "restart", rec.ID, "namespace", rec.Namespace, "action", act.verb, "status", out.Status)
	a.page.changed() // show the new intent at once, ahead of the next listing
	writeResult(w, http.StatusOK, actionResult{Message: act.done, Status: string(out.Status)})
}

// actionTarget finds the restart and checks that the action applies to it; it returns an
// HTTP status and a message when it does not.
func (a *Agent) actionTarget(ctx context.Context, id string, act pageAction, answer string) (*restart.Record, int, string) {
	rec, err := a.view.record(ctx, id)
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, http.StatusNotFound, fmt.Sprintf("no restart with ID or prefix %q", id)
	case errors.As(err, &amb):
		return nil, http.StatusBadRequest, err.Error()
	case err != nil:
		return nil, http.StatusBadGateway, "reading the restart: " + err.Error()
	}
	if rec.Status.Terminal() {
		return nil, http.StatusConflict, fmt.Sprintf("restart %s has already ended (%s); there is nothing to %s", short(rec.ID), rec.Status, act.verb)
	}
	if act.verb != "answer" {
		return rec, 0, ""
	}
	if rec.Status != restart.StatusWaiting || rec.Question == nil {
		return nil, http.StatusConflict, fmt.Sprintf("restart %s is not waiting for an answer (status: %s)", short(rec.ID), rec.Status)
	}
	if _, err := restart.ParseAnswer(rec.Question, answer); err != nil {
		return nil, http.StatusBadRequest, err.Error()
	}
	return rec, 0, ""
}

// steerFailure words a refused action (what: "pause restart 65a7dc87") on a restart of
// namespace for the page, with the HTTP status to answer. An ACL denial names the
// capability the token lacks and the rule that grants it.
func steerFailure(what, namespace string, err error) (int, string) {
	var perm *store.PermissionError
	var canceling *steer.CancelingError
	var busy *store.JobBusyError
	switch {
	case errors.As(err, &perm):
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token may not %s. Nomad refused %q on variable %q in namespace %q; the token's ACL policy needs %s (the operator policy of deploy/operator-policy.hcl has it).",
			what, perm.Capability, perm.Path, perm.Namespace, variablesRule(perm.Namespace, perm.Prefix))
	case errors.Is(err, cluster.ErrPermissionDenied):
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token may not %s: %s", what, err)
	case errors.As(err, &canceling):
		return http.StatusConflict, canceling.Explain("a cancel from this page")
	case errors.As(err, &busy):
		return http.StatusConflict, fmt.Sprintf("%s; follow it at /restart/%s, or cancel it first", err, busy.RestartID)
	case errors.Is(err, store.ErrNotFound):
		// The agent's token found it: the user's may not read it (Nomad lists only what a
		// token may read), or it was deleted meanwhile.
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token cannot %s: it cannot read the restart (set your ACL token under ACL Token, at the top of the page); the token's ACL policy needs %s (the operator policy of deploy/operator-policy.hcl has it).",
			what, variablesRule(namespace, ""))
	case errors.Is(err, steer.ErrNoQuestion), errors.Is(err, restart.ErrInvalidAnswer):
		return http.StatusConflict, err.Error()
	}
	return http.StatusBadGateway, fmt.Sprintf("%s: %s", what, err)
}

// variablesRule is the ACL policy rule granting every capability on the restarts' variables
// in namespace, worded as store.PermissionError words it for the CLI.
func variablesRule(namespace, prefix string) string {
	if prefix == "" {
		prefix = "nomad-restart"
	}
	return fmt.Sprintf(`namespace %q { variables { path "%s/*" { capabilities = ["read", "list", "write", "destroy"] } } }`, namespace, prefix)
}

func writeResult(w http.ResponseWriter, status int, res actionResult) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the page shows the text as text, never as HTML
	_ = enc.Encode(res)
}

// short is an ID shortened as Nomad shows IDs: 8 characters.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
