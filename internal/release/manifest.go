package release

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// ManifestName is the file of a release that names its hooks.
const ManifestName = "manifest.json"

// ManifestVersion is the one manifest version there is.
const ManifestVersion = 1

// ErrManifest is a release whose manifest is missing or malformed; a refusal for it is
// a *RefusedError naming ManifestName and wrapping ErrManifest.
var ErrManifest = errors.New("the manifest is malformed")

// Manifest is what a release's manifest says: the entrypoint ("module:attribute") of
// each slot.
type Manifest struct {
	Hooks map[string]string
}

// ReadManifest reads and checks the manifest of snap: a JSON object of exactly
// {"version": 1, "hooks": {...}} naming one entrypoint string for each slot of
// wire.Slots, and perhaps for slots of wire.OptionalSlots, and no other. The same
// check runs when a release is built and each time one is loaded, so a tree that would
// not activate is refused when it is built.
func ReadManifest(snap Snapshot) (Manifest, error) {
	i := slices.IndexFunc(snap.Files, func(f File) bool { return f.Name == ManifestName })
	if i < 0 {
		return Manifest{}, manifestRefused("the release has no " + ManifestName)
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(snap.Files[i].Data, &members); err != nil {
		return Manifest{}, manifestRefused("want a JSON object: " + err.Error())
	}
	if len(members) != 2 || members["version"] == nil || members["hooks"] == nil {
		return Manifest{}, manifestRefused(fmt.Sprintf(`want exactly the members "version" and "hooks", got %s`,
			quotedList(sortedKeys(members))))
	}
	if v := string(members["version"]); v != fmt.Sprint(ManifestVersion) {
		return Manifest{}, manifestRefused(fmt.Sprintf("version must be %d, got %s", ManifestVersion, v))
	}
	var hooks map[string]jsontext.Value
	if err := json.Unmarshal(members["hooks"], &hooks); err != nil || hooks == nil {
		return Manifest{}, manifestRefused(`"hooks" must be an object of entrypoints by slot`)
	}
	for _, slot := range wire.Slots {
		if hooks[slot] == nil {
			return Manifest{}, manifestRefused(`"hooks" has no entrypoint for the slot ` + slot)
		}
	}
	m := Manifest{Hooks: map[string]string{}}
	for _, slot := range sortedKeys(hooks) {
		if !slices.Contains(wire.Slots, slot) && !slices.Contains(wire.OptionalSlots, slot) {
			return Manifest{}, manifestRefused(fmt.Sprintf(`"hooks" names the unknown slot %q (the slots are %s)`,
				slot, strings.Join(append(slices.Clone(wire.Slots), wire.OptionalSlots...), ", ")))
		}
		var entrypoint string
		if err := json.Unmarshal(hooks[slot], &entrypoint); err != nil || entrypoint == "" {
			return Manifest{}, manifestRefused(fmt.Sprintf(`the entrypoint of %s must be a "module:attribute" string`, slot))
		}
		if module, attribute, _ := strings.Cut(entrypoint, ":"); !dottedName(module) || !dottedName(attribute) {
			return Manifest{}, manifestRefused(fmt.Sprintf(`the entrypoint of %s, %q, is not "module:attribute", each a dotted Python name`,
				slot, entrypoint))
		}
		m.Hooks[slot] = entrypoint
	}
	return m, nil
}

// Slots are the slots the manifest names, sorted, as its hooks worker's hello lists them.
func (m Manifest) Slots() []string { return slices.Sorted(maps.Keys(m.Hooks)) }

// dottedName reports whether text is one or more Python identifiers joined by dots, as
// the hooks worker, which imports the entrypoint, requires.
func dottedName(text string) bool {
	for part := range strings.SplitSeq(text, ".") {
		if !identifier(part) {
			return false
		}
	}
	return true
}

// identifier reports whether s is a Python identifier: a letter or underscore, then
// letters, digits, underscores and combining marks (Python's XID_Start and XID_Continue,
// by their Unicode categories).
func identifier(s string) bool {
	for i, r := range s {
		start := r == '_' || unicode.In(r, unicode.L, unicode.Nl, unicode.Other_ID_Start)
		if !start && (i == 0 || !unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc, unicode.Other_ID_Continue)) {
			return false
		}
	}
	return s != ""
}

func manifestRefused(problem string) error {
	return refused(ManifestName, fmt.Errorf("%w: %s", ErrManifest, problem))
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func quotedList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
