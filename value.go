package kiln

import (
	"fmt"

	"github.com/kilnrt/kiln/internal/lossless"
)

// EncodeValue returns the compact JSON text of v, exact: what JSON.stringify writes,
// except that an integral number has all its digits, so that the other side rebuilds
// the same double. NaN and the infinities are null, −0 is 0, as JSON.stringify has them.
func EncodeValue(v Value) []byte { return lossless.Encode(v) }

// DecodeValue parses data, exactly one JSON text in UTF-8, into the Value JSON.parse
// would make of it, with no limit on its depth.
func DecodeValue(data []byte) (Value, error) {
	v, err := lossless.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("kiln: %w", err)
	}
	return v, nil
}
