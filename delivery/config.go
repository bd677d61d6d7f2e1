package delivery

import (
	"fmt"
	"time"
)

// The defaults of `deliver async`'s settings.
const (
	DefaultConcurrency  = 4
	DefaultRetryInitial = time.Second
	DefaultRetryMax     = 10 * time.Minute
	DefaultGiveUp       = 24 * time.Hour
)

// Defaults is c with the settings left zero filled: DefaultConcurrency
// deliveries at once, a back-off from DefaultRetryInitial to
// DefaultRetryMax, given up after DefaultGiveUp.
func (c Config) Defaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = DefaultRetryInitial
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.GiveUp == 0 {
		c.GiveUp = DefaultGiveUp
	}
	return c
}

// Check says what is wrong with c's settings, or nil.
func (c Config) Check() error {
	switch {
	case c.Concurrency < 0 || c.Rate < 0:
		return fmt.Errorf("deliver async: concurrency and rate must be positive")
	case c.RetryMax < c.RetryInitial:
		return fmt.Errorf("deliver async: retry max (%v) is shorter than its initial back-off (%v)", c.RetryMax, c.RetryInitial)
	}
	return nil
}
