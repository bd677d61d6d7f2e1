package command

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/signer"
)

// Test key files, as `idempotency keygen` writes them and `idempotency
// send` and the examples' local Caddyfiles read them. The private keys
// stand in for the platform's own signing keys: send signs with them as
// the platform would, the gateway verifies with the public halves.
const (
	defaultKeyDir = "idemgate-testkeys"

	fileAlipayPrivate  = "alipay_private_key.pem"
	fileAlipayPublic   = "alipay_public_key.pem"
	fileWechatPrivate  = "wechatpay_private_key.pem"
	fileWechatPublic   = "wechatpay_public_key.pem"
	fileWechatPublicID = "wechatpay_public_key_id"
	fileWechatAPIv3    = "wechatpay_apiv3_key"
	fileWechatV2       = "wechatpay_v2_api_key"
	fileStripe         = "stripe_webhook_secret"
	filePayPalPrivate  = "paypal_private_key.pem"
	filePayPalCert     = "paypal_cert.pem"
	filePayPalWebhook  = "paypal_webhook_id"
	fileStdWebhooks    = "standard_webhooks_secret"
)

// sendPlatforms are the presets send and keygen know, in README order.
var sendPlatforms = []string{"alipay", "wechatpay", "wechatpay_v2", "stripe", "paypal", "standard_webhooks"}

func keygenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "keygen --platform <name|all> [--dir <dir>] [--force]",
		Short: "Writes test keys and secrets for trying a preset locally with send",
		Long: `
Writes throw-away keys for one preset (or all) into --dir (default
` + defaultKeyDir + `): the files a local Caddyfile names (public keys, a PayPal
certificate, secrets) and the private keys ` + "`idemgate idempotency send`" + ` signs with,
standing in for the platform's own. They are for local tests only: never
configure them on a route that takes real notifications.

  alipay             ` + fileAlipayPrivate + `, ` + fileAlipayPublic + `
  wechatpay          ` + fileWechatPrivate + `, ` + fileWechatPublic + `,
                     ` + fileWechatPublicID + `, ` + fileWechatAPIv3 + `
  wechatpay_v2       ` + fileWechatV2 + `
  stripe             ` + fileStripe + `
  paypal             ` + filePayPalPrivate + `, ` + filePayPalCert + `, ` + filePayPalWebhook + `
  standard_webhooks  ` + fileStdWebhooks + `

Existing files are kept unless --force is given.
`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			platform, _ := cmd.Flags().GetString("platform")
			dir, _ := cmd.Flags().GetString("dir")
			force, _ := cmd.Flags().GetBool("force")
			names := []string{platform}
			if platform == "all" {
				names = sendPlatforms
			} else if !slices.Contains(sendPlatforms, platform) {
				return fmt.Errorf("--platform must be one of %s or all, not %q", strings.Join(sendPlatforms, ", "), platform)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for _, name := range names {
				files, err := testKeys(name)
				if err != nil {
					return fmt.Errorf("%s: %v", name, err)
				}
				for _, f := range files {
					p := filepath.Join(dir, f.name)
					if err := writeKeyFile(p, f.data, force); err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
			}
			return nil
		},
	}
	c.Flags().String("platform", "", "The preset: "+strings.Join(sendPlatforms, ", ")+", or all")
	c.Flags().String("dir", defaultKeyDir, "Where to write the files")
	c.Flags().Bool("force", false, "Overwrite existing files")
	c.MarkFlagRequired("platform")
	return c
}

type keyFile struct {
	name string
	data []byte
}

// testKeys generates one preset's test files.
func testKeys(platform string) ([]keyFile, error) {
	var files []keyFile
	rsaPair := func(private, public string) (*rsa.PrivateKey, error) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		files = append(files, keyFile{private, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})})
		if public != "" {
			pub, err := signer.PublicKeyPEM(&k.PublicKey)
			if err != nil {
				return nil, err
			}
			files = append(files, keyFile{public, pub})
		}
		return k, nil
	}
	switch platform {
	case "alipay":
		if _, err := rsaPair(fileAlipayPrivate, fileAlipayPublic); err != nil {
			return nil, err
		}
	case "wechatpay":
		if _, err := rsaPair(fileWechatPrivate, fileWechatPublic); err != nil {
			return nil, err
		}
		files = append(files,
			keyFile{fileWechatPublicID, []byte("PUB_KEY_ID_TEST" + signer.Nonce(16))},
			keyFile{fileWechatAPIv3, []byte(signer.Nonce(32))})
	case "wechatpay_v2":
		files = append(files, keyFile{fileWechatV2, []byte(signer.Nonce(32))})
	case "stripe":
		files = append(files, keyFile{fileStripe, []byte("whsec_test" + signer.Nonce(32))})
	case "paypal":
		k, err := rsaPair(filePayPalPrivate, "")
		if err != nil {
			return nil, err
		}
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
		if err != nil {
			return nil, err
		}
		cert, err := signer.Certificate(k, serial, "messageverificationcerts.sandbox.paypal.com")
		if err != nil {
			return nil, err
		}
		files = append(files,
			keyFile{filePayPalCert, cert},
			keyFile{filePayPalWebhook, []byte("WH-TEST-" + signer.Nonce(17))})
	case "standard_webhooks":
		b := make([]byte, 24)
		rand.Read(b)
		files = append(files, keyFile{fileStdWebhooks, []byte("whsec_" + base64.StdEncoding.EncodeToString(b))})
	default:
		return nil, fmt.Errorf("no test keys for platform %q", platform)
	}
	return files, nil
}

// writeKeyFile writes a key file readable by its owner only.
func writeKeyFile(path string, data []byte, force bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !force {
		flag |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: keep it, or write new keys with --force (and restart the gateway that reads them)", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
