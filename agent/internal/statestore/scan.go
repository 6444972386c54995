package statestore

import (
	"errors"
	"fmt"
)

// stateScanner checks, as the bytes stream by, that a body is one JSON object, and keeps the
// few top-level members ParseState looks at. Its memory does not grow with the body: it holds
// the nesting stack and at most maxCaptured bytes of each member it keeps, so a state of any
// size (or a hostile body made of one huge string) is checked without being held in memory.
type stateScanner struct {
	stack []byte // '{' or '[' per open container
	st    scanState
	// lit is the rest of a literal being matched (true, false, null).
	lit     string
	num     int // position in a number's grammar (numMinus ...)
	hexLeft int // hex digits left in a \u escape
	// justOpened: the last token opened a container, so it may close at once ([] or {}).
	justOpened bool
	done       bool
	err        error

	// Capture of top-level members: the key being read, and the raw value of a kept member.
	keyBuf    []byte
	inKey     bool
	capturing string
	captured  map[string][]byte
	offset    int64
	// member is the top-level member being read (its name, cut at 64 bytes), and resources
	// counts the values that start directly inside the top-level "resources" array.
	member    string
	resources int64
}

type scanState int

const (
	scanValue    scanState = iota // a value must start
	scanString                    // inside a string
	scanEscape                    // after a backslash in a string
	scanNumber                    // inside a number
	scanLiteral                   // inside true/false/null
	scanAfter                     // after a value: ',' or a closing bracket
	scanKey                       // in an object: a key (or '}') must start
	scanColon                     // after a key: ':' must follow
	scanMaxDepth = 10000
	maxCaptured  = 4096
)

// literals are JSON's literals by their first byte.
var literals = map[byte]string{'t': "true", 'f': "false", 'n': "null"}

// keptMembers are the top-level members ParseState reads.
var keptMembers = map[string]bool{"version": true, "lineage": true, "serial": true, "terraform_version": true,
	"encrypted_data": true, "encryption_version": true}

func newStateScanner() *stateScanner {
	return &stateScanner{captured: map[string][]byte{}}
}

func (s *stateScanner) fail(format string, args ...any) error {
	s.err = fmt.Errorf("not a JSON object: "+format+" at byte %d", append(args, s.offset)...)
	return s.err
}

// Write scans p; it returns the first syntax error, and keeps returning it.
func (s *stateScanner) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for i, c := range p {
		if err := s.step(c); err != nil {
			return i, err
		}
		s.offset++
	}
	return len(p), nil
}

// Finish returns the kept members once the body ended, or why it is not one JSON object.
func (s *stateScanner) Finish() (map[string][]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if !s.done {
		if s.offset == 0 {
			return nil, errors.New("empty body")
		}
		return nil, fmt.Errorf("not a JSON object: unexpected end after %d bytes (truncated?)", s.offset)
	}
	return s.captured, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// keep records byte c of a kept member's value.
func (s *stateScanner) keep(c byte) {
	if s.capturing != "" && len(s.stack) >= 1 {
		if v := s.captured[s.capturing]; len(v) < maxCaptured {
			s.captured[s.capturing] = append(v, c)
		}
	}
}

func (s *stateScanner) step(c byte) error {
	switch s.st {
	case scanString:
		return s.inString(c)
	case scanEscape:
		return s.inEscape(c)
	case scanNumber:
		if s.inNumber(c) {
			s.keep(c)
			return nil
		}
		if !s.numberComplete() {
			return s.fail("incomplete number")
		}
		s.st = scanAfter
		return s.step(c)
	case scanLiteral:
		if c != s.lit[0] {
			return s.fail("invalid literal")
		}
		s.keep(c)
		if s.lit = s.lit[1:]; s.lit == "" {
			s.endValue()
		}
		return nil
	}
	if isSpace(c) {
		return nil
	}
	switch s.st {
	case scanValue:
		return s.startValue(c)
	case scanKey:
		switch {
		case c == '"':
			s.st, s.inKey, s.keyBuf, s.justOpened = scanString, true, s.keyBuf[:0], false
			if len(s.stack) > 1 {
				s.keep(c)
			}
			return nil
		case c == '}' && s.justOpened:
			return s.close(c)
		}
		return s.fail("expected a member name")
	case scanColon:
		if c != ':' {
			return s.fail("expected ':'")
		}
		if len(s.stack) > 1 {
			s.keep(c)
		}
		s.st = scanValue
		return nil
	case scanAfter:
		return s.after(c)
	}
	return s.fail("unexpected %q", c)
}

func (s *stateScanner) startValue(c byte) error {
	if s.done {
		return s.fail("data after the top-level value")
	}
	if len(s.stack) == 0 && c != '{' {
		return s.fail("the body does not start with '{'")
	}
	if c == ']' && s.justOpened {
		return s.close(c) // empty array
	}
	s.keep(c)
	s.justOpened = false
	if len(s.stack) == 2 && s.stack[1] == '[' && s.member == "resources" {
		s.resources++
	}
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= scanMaxDepth {
			return s.fail("nested deeper than %d", scanMaxDepth)
		}
		s.stack = append(s.stack, c)
		s.st, s.justOpened = scanValue, true
		if c == '{' {
			s.st = scanKey
		}
		return nil
	case c == '"':
		s.st = scanString
	case c == '-':
		s.st, s.num = scanNumber, numMinus
	case c == '0':
		s.st, s.num = scanNumber, numZero
	case c >= '1' && c <= '9':
		s.st, s.num = scanNumber, numInt
	case c == 't' || c == 'f' || c == 'n':
		s.st, s.lit = scanLiteral, literals[c][1:]
	default:
		return s.fail("unexpected %q", c)
	}
	return nil
}

func (s *stateScanner) inString(c byte) error {
	switch {
	case c == '"':
		if s.inKey {
			s.inKey = false
			s.st = scanColon
			if len(s.stack) > 1 {
				s.keep(c)
				return nil
			}
			s.capturing, s.member = "", string(s.keyBuf)
			if keptMembers[string(s.keyBuf)] {
				s.capturing = string(s.keyBuf)
				s.captured[s.capturing] = nil
			}
			return nil
		}
		s.keep(c)
		s.endValue()
		return nil
	case c < 0x20:
		return s.fail("control character in a string")
	case c == '\\':
		s.st = scanEscape
	}
	s.record(c)
	return nil
}

func (s *stateScanner) inEscape(c byte) error {
	if s.hexLeft > 0 {
		if !isHex(c) {
			return s.fail("invalid \\u escape")
		}
		s.record(c)
		if s.hexLeft--; s.hexLeft == 0 {
			s.st = scanString
		}
		return nil
	}
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.st = scanString
	case 'u':
		s.hexLeft = 4
	default:
		return s.fail("invalid escape")
	}
	s.record(c)
	return nil
}

// record keeps a byte of a string: of the key being read (bounded), or of a kept value.
func (s *stateScanner) record(c byte) {
	if s.inKey && len(s.stack) == 1 {
		if len(s.keyBuf) < 64 {
			s.keyBuf = append(s.keyBuf, c)
		}
		return
	}
	s.keep(c)
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// Number grammar positions: what a number has seen so far.
const (
	numMinus    = iota // "-"
	numZero            // a leading "0"
	numInt             // integer digits
	numDot             // "."
	numFrac            // fraction digits
	numE               // "e" or "E"
	numESign           // the exponent's sign
	numExpDigit        // exponent digits
)

// inNumber reports whether c continues the number, following JSON's grammar exactly.
func (s *stateScanner) inNumber(c byte) bool {
	digit := c >= '0' && c <= '9'
	switch p := s.num; {
	case p == numMinus && c == '0':
		s.num = numZero
	case p == numMinus && digit:
		s.num = numInt
	case (p == numZero || p == numInt) && c == '.':
		s.num = numDot
	case (p == numZero || p == numInt || p == numFrac) && (c == 'e' || c == 'E'):
		s.num = numE
	case p == numInt && digit:
	case (p == numDot || p == numFrac) && digit:
		s.num = numFrac
	case p == numE && (c == '+' || c == '-'):
		s.num = numESign
	case (p == numE || p == numESign || p == numExpDigit) && digit:
		s.num = numExpDigit
	default:
		return false
	}
	return true
}

// numberComplete reports whether the number can end here.
func (s *stateScanner) numberComplete() bool {
	return s.num == numZero || s.num == numInt || s.num == numFrac || s.num == numExpDigit
}

func (s *stateScanner) endValue() {
	s.st = scanAfter
	if len(s.stack) == 0 {
		s.done = true
	}
}

func (s *stateScanner) after(c byte) error {
	if len(s.stack) == 0 {
		return s.fail("data after the top-level value")
	}
	top := s.stack[len(s.stack)-1]
	switch {
	case c == ',':
		if len(s.stack) == 1 {
			s.capturing = ""
		}
		s.keep(c)
		s.st = scanValue
		if top == '{' {
			s.st = scanKey
		}
		return nil
	case (c == '}' && top == '{') || (c == ']' && top == '['):
		return s.close(c)
	}
	return s.fail("expected ',' or a closing bracket")
}

func (s *stateScanner) close(c byte) error {
	s.justOpened = false
	s.stack = s.stack[:len(s.stack)-1]
	if len(s.stack) == 0 {
		s.capturing = ""
	}
	s.keep(c)
	s.endValue()
	return nil
}
