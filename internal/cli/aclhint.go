package cli

import (
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// aclHint names the capability a 403 from the allocation restart or stop endpoint means is
// missing, and the policy rule that grants it: Nomad's own answer says only "Permission
// denied". "" when no failure was a denial.
func aclHint(rec *restart.Record, failed []restart.AllocProgress) string {
	denied := false
	for _, f := range failed {
		if strings.Contains(f.Error, "code: 403") || strings.Contains(f.Error, "Permission denied") {
			denied = true
			break
		}
	}
	if !denied {
		return ""
	}
	ns := rec.Namespace
	if ns == "" {
		ns = "default"
	}
	endpoint := "restart"
	if rec.Spec.Reschedule {
		endpoint = "stop"
	}
	return fmt.Sprintf("The token may not %s allocations: that needs the alloc-lifecycle capability in namespace %q. Add it to the token's policy, as in\n"+
		"  namespace %q { capabilities = [\"read-job\", \"alloc-lifecycle\"] }\n"+
		"(see docs/acl.md for every capability nomad-restart uses)", endpoint, ns, ns)
}
