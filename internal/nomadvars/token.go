package nomadvars

import (
	"context"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Unrestricted reports whether the client's token passes every ACL check on variables
// without a policy being asked: ACLs are disabled, or it is a management token. It is
// asked once (a probe's first question, which decides whether any other is needed); its
// error is the api client's, so that StatusOf tells a refused token (403) from a cluster
// that did not answer.
func (c *Client) Unrestricted(ctx context.Context, ns string) (bool, error) {
	self, _, err := c.api.ACLTokens().Self((&api.QueryOptions{Namespace: ns, Region: c.region}).WithContext(ctx))
	switch {
	case err != nil && strings.Contains(err.Error(), "ACL support disabled"):
		return true, nil // older agents answer this way when ACLs are off
	case err != nil:
		return false, err
	}
	return self.AccessorID == "acls-disabled" || self.Type == "management", nil
}
