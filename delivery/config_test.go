package delivery

import (
	"strings"
	"testing"
	"time"
)

// TestConfigDefaults: settings left zero take the defaults, set ones stay;
// negative limits and a back-off whose max is below its start are refused.
func TestConfigDefaults(t *testing.T) {
	d := Config{}.Defaults()
	if d.Concurrency != 4 || d.RetryInitial != time.Second || d.RetryMax != 10*time.Minute || d.GiveUp != 24*time.Hour || d.Rate != 0 {
		t.Errorf("defaults: %+v", d)
	}
	set := Config{Concurrency: 2, Rate: 5, RetryInitial: time.Millisecond, RetryMax: time.Second, GiveUp: time.Hour}
	if got := set.Defaults(); got.Concurrency != 2 || got.Rate != 5 || got.RetryInitial != time.Millisecond ||
		got.RetryMax != time.Second || got.GiveUp != time.Hour {
		t.Errorf("set settings changed: %+v", got)
	}
	if err := d.Check(); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Concurrency: -1}, "positive"},
		{Config{Rate: -1}, "positive"},
		{Config{RetryInitial: time.Minute, RetryMax: time.Second}, "retry max (1s) is shorter than its initial back-off (1m0s)"},
	} {
		if err := c.cfg.Defaults().Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
