package stampede

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
)

// Codec turns values into bytes stored in Redis and back. Implementations
// must be safe for concurrent use.
type Codec interface {
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into the value v points to.
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default Codec: encoding/json. Like encoding/json it
// replaces invalid UTF-8 in strings with U+FFFD; use []byte or GobCodec for
// arbitrary bytes.
type JSONCodec struct{}

// Marshal encodes v as JSON.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON data into v.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// GobCodec encodes values with encoding/gob. It round-trips strings byte for
// byte and is usually more compact than JSON for Go structs; note that gob
// decodes an empty slice or map as nil.
type GobCodec struct{}

// Marshal encodes v with gob.
func (GobCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Unmarshal decodes gob data into v.
func (GobCodec) Unmarshal(data []byte, v any) error {
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}
