// Package redact removes credentials from the connection URLs the fleet's programs take
// (--nats-url, --redis-url), so that no log line or error shows one.
//
// One rule for every form nats.go and go-redis accept, with or without a scheme, one URL or a
// comma list: the userinfo is everything before the last '@' of a URL, because a password may hold
// any of / ? # : @ % unescaped, and a parser that stops at the first '/' (or reads "user:" as a
// scheme) leaves it in place. The rule errs towards hiding a host rather than showing a secret:
// where commas cannot be told apart from a password's, the whole list up to its last '@' goes.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a credential.
const Mask = "REDACTED"

// queryParam is one key=value of a query; a key that names a password, as written or escaped
// (sentinel_password, sentinel%5Fpassword), has its value masked.
var queryParam = regexp.MustCompile(`([?&])([^?&=#]*)=([^&]*)`)

// scheme is what may stand before "://": anything else there is part of a credential.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// secretKey reports whether a query key names a credential, once unescaped.
func secretKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	return strings.Contains(strings.ToLower(key), "password")
}

// URL is urls with every userinfo (user name, password or token) and every value of a query key
// naming a password (sentinel_password) replaced by [Mask].
func URL(urls string) string {
	masked, _ := mask(urls)
	return masked
}

// HasSecret reports whether urls may carry a credential, in which case an error about them must
// not quote them or the parser's view of them.
func HasSecret(urls string) bool {
	_, spans := mask(urls)
	return strings.Contains(urls, "@") || len(spans) > 0
}

// Text is msg with every credential of urls replaced by [Mask]: what [URL] hides, and each piece of
// it between the characters a parser splits on, as written and unescaped, since a parser that
// misread the URL may quote any of them (nats.go dials the half of "nats://a,b@h" before the comma
// as a host, and the dial error names it).
func Text(msg, urls string) string {
	_, spans := mask(urls)
	var secrets []string
	for _, span := range spans {
		pieces := strings.FieldsFunc(span, func(r rune) bool { return strings.ContainsRune(":,/?#@&", r) })
		for _, p := range append(pieces, span) {
			secrets = append(secrets, p)
			if u, err := url.QueryUnescape(p); err == nil {
				secrets = append(secrets, u)
			}
		}
	}
	// The longest first, so that a secret is not left in pieces around a shorter one's mask.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, Mask)
		}
	}
	return msg
}

// mask is urls with its credentials masked, and the masked spans.
func mask(urls string) (string, []string) {
	var spans []string
	urls = queryParam.ReplaceAllStringFunc(urls, func(m string) string {
		sub := queryParam.FindStringSubmatch(m)
		if !secretKey(sub[2]) {
			return m
		}
		spans = append(spans, sub[3])
		return sub[1] + sub[2] + "=" + Mask
	})
	parts := strings.Split(urls, ",")
	if len(parts) > 1 && !all(parts, func(p string) bool { return strings.Contains(p, "://") }) {
		// A Sentinel or Cluster host list, a scheme-less list, or a credential with a comma: one
		// authority as far as the last '@'.
		parts = []string{urls}
	}
	for i, p := range parts {
		at := strings.LastIndexByte(p, '@')
		if at < 0 {
			continue
		}
		start := 0
		if j := strings.Index(p, "://"); j >= 0 && j < at && scheme.MatchString(p[:j]) {
			start = j + len("://")
		}
		spans = append(spans, p[start:at])
		parts[i] = p[:start] + Mask + p[at:]
	}
	return strings.Join(parts, ","), spans
}

func all(ss []string, f func(string) bool) bool {
	for _, s := range ss {
		if !f(s) {
			return false
		}
	}
	return true
}
