package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// FormatVersion is the version of the format of the -json outputs (docs/json.md),
// which every JSON object nomad-restart prints carries as its first field, FormatVersion.
// It changes only when a field is removed or renamed, or changes type or meaning; fields
// are added without a change, so readers ignore the fields they do not know.
const FormatVersion = 1

// Marshal encodes v as JSON with the format's version as the first field of the
// object it encodes to, or of each object of the array it encodes to, so that every -json
// output carries it without a change to the types printed. Every JSON the commands print
// goes through it.
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(b) == 0 {
		return b, err
	}
	switch b[0] {
	case '{':
		return withFormatVersion(b), nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, fmt.Errorf("adding the format version to a JSON array: %w", err)
		}
		for i, item := range items {
			if len(item) > 0 && item[0] == '{' {
				items[i] = withFormatVersion(item)
			}
		}
		return json.Marshal(items)
	}
	return b, nil
}

// withFormatVersion puts "FormatVersion" first in obj, a compact JSON object.
func withFormatVersion(obj []byte) []byte {
	field := fmt.Sprintf(`{"FormatVersion":%d`, FormatVersion)
	rest := obj[1:]
	if len(rest) > 0 && rest[0] != '}' {
		field += ","
	}
	return append([]byte(field), rest...)
}

// WriteJSON writes v as indented JSON, with the format's version (Marshal).
func WriteJSON(w io.Writer, v any) error {
	b, err := Marshal(v)
	if err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "    "); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	out.WriteByte('\n')
	if _, err := out.WriteTo(w); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
