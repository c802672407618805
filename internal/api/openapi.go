package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's OpenAPI 3.1 document.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
