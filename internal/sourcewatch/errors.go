package sourcewatch

import (
	"errors"
	"fmt"
	"net/http"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// ErrNoConsul says a Consul source was read by a hub that has no Consul (Options.Consul).
var ErrNoConsul = errors.New("no Consul is configured: give Consul's address (CONSUL_HTTP_ADDR) to watch Consul keys")

// errNoNomad says a Nomad source was read by a hub made without a Nomad client.
var errNoNomad = errors.New("this hub has no Nomad client")

// DeniedError says Nomad or Consul refused to show a source (a 403). Err is the server's
// answer: a *nomadvars.PermissionError from Nomad, a consulapi.StatusError from Consul.
type DeniedError struct {
	Source onchange.Source
	Err    error
}

func (e *DeniedError) Error() string {
	if e.Source.Kind.Nomad() {
		// Nomad leaves out of a listing what the token may not list, so a 403 refuses the
		// token itself (unknown, expired), whatever its policies say.
		return fmt.Sprintf("%v: check that the token exists and has not expired; it needs %s", e.Err, e.Rule())
	}
	return fmt.Sprintf("Consul denied key read (%v): grant the Consul token %s", e.Err, e.Rule())
}

func (e *DeniedError) Unwrap() error { return e.Err }

// Rule is the ACL policy rule that lets a token read the source, and nothing more: list
// on a Nomad variable's path (its metadata is all a hub reads, so never read on a secret),
// read on a Consul key or prefix.
func (e *DeniedError) Rule() string {
	src := e.Source
	switch src.Kind {
	case onchange.NomadVariable, onchange.NomadPrefix:
		path := src.Path
		if src.Kind == onchange.NomadPrefix {
			path += "*"
		}
		return fmt.Sprintf(`namespace %q { variables { path %q { capabilities = ["list"] } } }`, nomadvars.Namespace(src.Namespace), path)
	case onchange.ConsulPrefix:
		return fmt.Sprintf(`key_prefix %q { policy = "read" }`, src.Path)
	}
	return fmt.Sprintf(`key %q { policy = "read" }`, src.Path)
}

// sourceErr is a failed read as it applies to src, worded alike for a watch and a Read: a
// denial becomes a *DeniedError naming the rule to grant; any other error stays as it is.
func sourceErr(src onchange.Source, err error) error {
	var (
		perm   *nomadvars.PermissionError
		status consulapi.StatusError
	)
	if src.Kind.Nomad() && errors.As(err, &perm) ||
		!src.Kind.Nomad() && errors.As(err, &status) && status.Code == http.StatusForbidden {
		return &DeniedError{Source: src, Err: err}
	}
	return err
}

// checkConsulKind refuses a source that keyOf gave to Consul but that is no Consul key or
// prefix (of no kind a hub reads), rather than query Consul for it.
func checkConsulKind(src onchange.Source) error {
	if src.Kind == onchange.ConsulKey || src.Kind == onchange.ConsulPrefix {
		return nil
	}
	return fmt.Errorf("unknown kind of source %q: give one of %s, %s, %s, %s", src.Kind,
		onchange.NomadVariable, onchange.NomadPrefix, onchange.ConsulKey, onchange.ConsulPrefix)
}
