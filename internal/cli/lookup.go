package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// idOptionsHelp ends the help of the commands that take a restart's or fleet's ID.
const idOptionsHelp = `
Options:

  -state=<auto|nomad|local>, -verbose, and Nomad's -address, -region,
  -namespace, -token and TLS options, and -request-timeout (see
  "nomad-restart run -help").
`

// idOptions are the options every command addressing restarts takes.
type idOptions struct {
	client  clientFlags
	state   string
	verbose bool
	// namespace is -namespace as given on the command line ("" when not given: look in
	// every namespace, since restart IDs are unique).
	namespace string
}

// parsed finishes parsing: -state, the namespace filter, the environment.
func (o *idOptions) parsed(env func(string) string) error {
	if err := validState(o.state); err != nil {
		return err
	}
	o.namespace = o.client.namespace
	o.client = o.client.withEnv(env)
	return nil
}

// parseIDFlags parses the options of cmd, a command on existing restarts: idOptions into o
// and those that extra registers (nil: none). It returns the arguments after the options.
func (a *app) parseIDFlags(cmd string, o *idOptions, args []string, extra func(fs *flag.FlagSet)) ([]string, error) {
	rest, err := parseClientFlags(cmd, &o.client, args, func(fs *flag.FlagSet) {
		fs.StringVar(&o.state, "state", stateAuto, "")
		fs.BoolVar(&o.verbose, "verbose", false, "")
		if extra != nil {
			extra(fs)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := o.parsed(a.env); err != nil {
		return nil, err
	}
	return rest, nil
}

// oneID takes exactly one restart ID from args.
func oneID(cmd string, args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usageErrorf("missing restart ID: give the ID or a unique prefix, as in `nomad-restart %s <id>` (list them with `nomad-restart status`)", cmd)
	case len(args) > 1:
		return "", usageErrorf("too many arguments %q: %s takes one restart ID (options go before it)", strings.Join(args, " "), cmd)
	}
	id := strings.TrimSpace(args[0])
	if id == "" {
		return "", usageErrorf("empty restart ID: give the ID or a unique prefix")
	}
	return id, nil
}

// open connects for a command on existing restarts.
func (a *app) openForIDs(o *idOptions) (session, error) {
	logger, err := a.logger(o.client.logLevel)
	if err != nil {
		return nil, err
	}
	return a.backend.open(o.client, logger, a.holder())
}

// stores lists the stores to look in, in order: with -state auto, Nomad's when it answers,
// then this machine's.
func (a *app) stores(ctx context.Context, ses session, state string) ([]store.Store, error) {
	switch state {
	case stateLocal:
		st, err := ses.localStore()
		if err != nil {
			return nil, fmt.Errorf("opening the local state store: %w", err)
		}
		return []store.Store{localScoped(ses, st)}, nil
	case stateNomad:
		if err := ses.reachable(ctx); err != nil {
			return nil, err
		}
		return []store.Store{ses.nomadStore()}, nil
	}
	var out []store.Store
	nomadErr := ses.reachable(ctx)
	if nomadErr == nil {
		out = append(out, ses.nomadStore())
	}
	var local store.Store
	if st, err := ses.localStore(); err == nil {
		local = localScoped(ses, st)
		out = append(out, local)
	}
	switch {
	case nomadErr == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case local == nil:
		return nil, fmt.Errorf("neither Nomad at %s nor the local state store can be read; set -address or NOMAD_ADDR", ses.address())
	case !holdsAny(ctx, local):
		// Nothing here to show instead: Nomad's failure is the answer, in its one line.
		return nil, nomadErr
	default:
		// Never silently: restarts kept in Nomad would look absent.
		what := output.OneLine(errorLine(nomadErr))
		if _, ok := upstream.Find(nomadErr); !ok {
			what = "Nomad at " + ses.address() + ": " + what
		}
		fmt.Fprintf(a.stderr, "Warning: the Nomad store could not be read (%s); only this machine's local records are shown. Check -address or NOMAD_ADDR (and -region, NOMAD_TOKEN), or pass -state local to look only here\n", what)
	}
	return out, nil
}

// holdsAny reports whether st holds a restart record (of any namespace), or cannot tell.
func holdsAny(ctx context.Context, st store.Store) bool {
	recs, err := st.List(ctx, store.Filter{Namespace: "*"})
	return err != nil || len(recs) > 0
}

// find resolves a restart ID or unique prefix in the stores, in order.
func (a *app) find(ctx context.Context, stores []store.Store, namespace, prefix string) (store.Store, *restart.Record, error) {
	var readErrs []string
	var kinds []string
	var unanswered error // a store's server did not answer, or something else did
	for _, st := range stores {
		kinds = append(kinds, st.Kind())
		rec, err := st.Find(ctx, namespace, prefix)
		if err == nil {
			return st, rec, nil
		}
		var amb *store.AmbiguousIDError
		var other *store.OtherClusterError
		switch {
		case errors.As(err, &amb):
			return nil, nil, amb
		case errors.As(err, &other):
			return nil, nil, errors.New(other.Error())
		case errors.Is(err, store.ErrNotFound):
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		default:
			if _, ok := upstream.Find(err); ok && unanswered == nil {
				unanswered = err
			}
			readErrs = append(readErrs, fmt.Sprintf("the %s store could not be read: %s", st.Kind(), output.OneLine(err.Error())))
		}
	}
	if unanswered != nil {
		// The restart may well be there: what keeps it from being read is the answer.
		return nil, nil, unanswered
	}
	msg := fmt.Sprintf("no restart matches ID %q (looked in the %s store); list restarts with `nomad-restart status`", prefix, strings.Join(kinds, " and "))
	if len(readErrs) > 0 {
		msg += "; " + strings.Join(readErrs, "; ")
	}
	return nil, nil, errors.New(msg)
}

// listAll lists the records of every store, newest first, each ID once.
func (a *app) listAll(ctx context.Context, stores []store.Store, f store.Filter) ([]*restart.Record, map[string]string, error) {
	seen := map[string]string{}
	var out []*restart.Record
	var lastErr error
	var unread []string
	read := 0
	for _, st := range stores {
		recs, err := st.List(ctx, f)
		if err != nil {
			if _, ok := upstream.Find(err); ok {
				lastErr = err // its one line says it all (errorLine)
			} else {
				lastErr = fmt.Errorf("listing restarts in the %s store: %s", st.Kind(), output.OneLine(err.Error()))
			}
			unread = append(unread, fmt.Sprintf("the %s store could not be read (%s)", st.Kind(), output.OneLine(errorLine(err))))
			continue
		}
		read++
		for _, r := range recs {
			if _, dup := seen[r.ID]; dup {
				continue
			}
			seen[r.ID] = st.Kind()
			out = append(out, r)
		}
	}
	if lastErr != nil && (read == 0 || len(out) == 0) {
		// Nothing to show instead: the failure is the answer.
		return nil, nil, lastErr
	}
	if len(unread) > 0 && ctx.Err() == nil {
		// Never silently: the restarts kept there would look absent.
		fmt.Fprintf(a.stderr, "Warning: %s; only the other store's records are shown\n", strings.Join(unread, "; "))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreateTime.After(out[j].CreateTime) })
	return out, seen, nil
}

// localScoped is this machine's store as seen from the session's cluster: it holds the
// restarts of every cluster the operator talks to, and only this one's may be seen here.
func localScoped(ses session, st store.Store) store.Store {
	return store.ScopeToCluster(st, store.ClusterName(ses.address()))
}
