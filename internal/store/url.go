package store

import "net/url"

// RedactURL returns a database URL fit for logs and errors: any password,
// in the user info or in the query, replaced by "xxxxx". A string that does
// not parse is replaced entirely, as it may hold a password where this
// cannot find it.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable database URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
