package page

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// decodeJSON reads a request's body, at most limit bytes, as exactly one JSON value into v.
// A body with more after its value (a second value, trailing text) or cut at the limit is
// an error: a request is never acted on from its first part. An empty body (white space
// only) is io.EOF, for the actions that take none.
func decodeJSON(body io.Reader, limit int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("it is longer than %d bytes", limit)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return io.EOF
	}
	return json.Unmarshal(b, v)
}
