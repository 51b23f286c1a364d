package api

import (
	_ "embed"
	"net/http"
)

//go:generate go run ./openapigen/gen openapi.json

// openapiJSON is the API's OpenAPI 3.0 document, generated from the route
// table and the apitypes types by package openapigen, whose tests fail
// when it is not what they generate.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiJSON)
}
