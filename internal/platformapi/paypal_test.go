package platformapi_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/paypal"
)

// TestPayPalStandIn: a token from the client credentials, the list paged
// by its next link within start_time/end_time, and a resend delivered
// signed as PayPal signs, which the PayPal preset verifies with the
// certificate.
func TestPayPalStandIn(t *testing.T) {
	key, _ := platformtest.Keys(t)
	cert := platformtest.Certificate(t, key, big.NewInt(7), "messageverificationcerts.sandbox.paypal.com")
	ep := newEndpoint(t)
	api := &platformapi.PayPal{ClientID: "AXid", Secret: "EHsecret", URL: ep.srv.URL,
		Signer: signer.PayPal{Key: key, WebhookID: "WH-1"}}
	now := time.Now().UTC().Truncate(time.Second)
	for i := 0; i < 5; i++ {
		ev := fmt.Sprintf(`{"id":"WH-E%d","event_type":"PAYMENT.CAPTURE.COMPLETED","create_time":%q,"resource":{"id":"CAP%d","amount":{"currency_code":"USD","value":"1.0%d"}}}`,
			i, now.Add(-time.Duration(i)*time.Hour).Format(time.RFC3339), i, i)
		if err := api.Add([]byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	form := strings.NewReader("grant_type=client_credentials")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/oauth2/token", form)
	req.SetBasicAuth("AXid", "EHsecret")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.AccessToken == "" || tok.ExpiresIn <= 0 {
		t.Fatalf("token: %+v", tok)
	}
	q := url.Values{"page_size": {"2"}, "start_time": {now.Add(-3*time.Hour - time.Minute).Format(time.RFC3339)}}
	next := srv.URL + "/v1/notifications/webhooks-events?" + q.Encode()
	var ids []string
	for next != "" {
		var page struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
			Links []struct{ Href, Rel string } `json:"links"`
		}
		if st := getJSON(t, next, tok.AccessToken, &page); st != 200 {
			t.Fatalf("status %d", st)
		}
		next = ""
		for _, e := range page.Events {
			ids = append(ids, e.ID)
		}
		for _, l := range page.Links {
			if l.Rel == "next" {
				u, _ := url.Parse(l.Href)
				next = srv.URL + u.RequestURI()
			}
		}
	}
	if strings.Join(ids, ",") != "WH-E0,WH-E1,WH-E2,WH-E3" {
		t.Fatalf("listed %v", ids)
	}

	body := `{"webhook_ids":["WH-1"]}`
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1/notifications/webhooks-events/WH-E2/resend", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got, bodies := ep.deliveries()
	if resp.StatusCode != 202 || len(got) != 1 || api.Resends("WH-E2") != 1 {
		t.Fatalf("resend: %d, %d deliveries", resp.StatusCode, len(got))
	}
	p, err := paypal.New(paypal.Config{WebhookID: "WH-1", Certificates: [][]byte{cert}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Verify(&keying.Request{Method: "POST", Header: got[0].Header, Body: bodies[0], Now: time.Now()})
	if err != nil {
		t.Fatalf("the PayPal preset refuses the delivery: %v", err)
	}
	if n.Key != "WH-E2" || n.Money != (keying.Money{Amount: "1.02", Currency: "USD"}) {
		t.Fatalf("delivered %s %+v", n.Key, n.Money)
	}
}
