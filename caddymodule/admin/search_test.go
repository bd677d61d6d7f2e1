package admin

import "testing"

func TestMayStartKey(t *testing.T) {
	scopes := []string{"alipay", "stripe"}
	for _, c := range []struct {
		text string
		want bool
	}{
		{"SHOP-20261203-0042", false}, // an order number: by reference alone
		{"pi_3MtwBwLkdIwHu7ix28a3tqPa", false},
		{"alip", true},
		{"stripe", true},
		{"alipay:2021000000000001", true},
		{"gone:evt_1", true}, // a scope no longer loaded still has keys
	} {
		if got := mayStartKey(c.text, scopes); got != c.want {
			t.Errorf("mayStartKey(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}
