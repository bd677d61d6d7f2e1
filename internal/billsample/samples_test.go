package billsample

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms"
)

// TestSamples: `go run ./examples/bills -platform all` writes one bill per
// platform with a sample (its module's SampleBill) that reads whole with
// its platform's bill Format (its totals agree where it has them) — the
// default sample of three payments and a refund, on the day asked for —
// and an Alipay zip that holds the same 业务明细 file; -account names the
// merchant in the bill; bad arguments are refused, saying why.
func TestSamples(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := Samples([]string{"-day", "2026-10-03", "-out", dir}, &out); err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(out.String())
	if len(files) != 5 {
		t.Fatalf("wrote %v", files)
	}
	for _, c := range []struct{ platform, name, currency string }{
		{"alipay", "20881021772966100156_20261003_业务明细.csv", "CNY"},
		{"wechatpay", "wechatpay_tradebill_20261003_ALL.csv", "CNY"},
		{"stripe", "stripe_balance_change_from_activity_itemized_20261003.csv", "USD"},
		{"paypal", "STL-20261003.01.009.CSV", "USD"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.name))
		if err != nil {
			t.Fatal(err)
		}
		rd, err := platforms.BillOf(c.platform).Format.Open(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", c.platform, err)
		}
		var kinds []bill.Kind
		for {
			r, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", c.platform, err)
			}
			if r.Currency != c.currency || r.Time.Format("2006-01-02") != "2026-10-03" {
				t.Errorf("%s row %+v", c.platform, r)
			}
			kinds = append(kinds, r.Kind)
		}
		if len(kinds) != 4 || kinds[3] != bill.Refund || rd.Summary().Checked != (c.platform != "stripe") {
			t.Errorf("%s: rows %v, summary %+v", c.platform, kinds, rd.Summary())
		}
		if c.platform == "alipay" {
			zr, err := zip.OpenReader(filepath.Join(dir, "20881021772966100156_20261003.csv.zip"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := zr.File[0].Open()
			if err != nil {
				t.Fatal(err)
			}
			inner, _ := io.ReadAll(f)
			zr.Close()
			if zr.File[0].Name != c.name || !bytes.Equal(inner, b) {
				t.Errorf("the zip holds %s, %d bytes", zr.File[0].Name, len(inner))
			}
		}
	}
	var one strings.Builder
	if err := Samples([]string{"-platform", "wechatpay", "-account", "1900000109", "-day", "2026-10-04", "-out", dir}, &one); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(strings.TrimSpace(one.String()))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := platforms.BillOf("wechatpay").Format.Open(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := rd.Next(); err != nil || r.Merchant != "1900000109" {
		t.Errorf("-account: the first row %+v, %v; want the merchant 1900000109", r, err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-platform", "square"}, "-platform must be"},
		{[]string{"-platform", "alipay", "2026=9.9"}, "two decimals"},
		{[]string{"-platform", "alipay", "2026"}, "want <id>=<amount>"},
		{[]string{"-platform", "alipay", "2026=9.90@25:00:00"}, "HH:MM:SS"},
		{[]string{"-day", "3 Oct"}, "-day"},
	} {
		if err := Samples(append(c.args, "-out", dir), io.Discard); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %q", c.args, err, c.says)
		}
	}
}
