package platformtest

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"sync"
	"testing"
)

var (
	fixedOnce  sync.Once
	fixedA     *rsa.PrivateKey
	fixedB     *rsa.PrivateKey
	fixedError error
)

// FixedKeys returns two RSA-2048 keys that are the same in every run, for
// fuzz targets, whose seeds then are the same bytes on every run too.
// They are test-only keys, published here, and sign nothing real.
func FixedKeys(t testing.TB) (platform, other *rsa.PrivateKey) {
	t.Helper()
	fixedOnce.Do(func() {
		if fixedA, fixedError = parsePKCS8RSA(fixedKeyA); fixedError == nil {
			fixedB, fixedError = parsePKCS8RSA(fixedKeyB)
		}
	})
	if fixedError != nil {
		t.Fatalf("platformtest: fixed key: %v", fixedError)
	}
	return fixedA, fixedB
}

func parsePKCS8RSA(pemText string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(pemText))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	return k.(*rsa.PrivateKey), nil
}

const fixedKeyA = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDPFPXEuwqc1VrQ
qb1W4BfYtgkOPm/GwlgclIrFjCTSkCrs4dCXPNc8qGE+KkD1T9HbHIj/k/EPnRAe
pU5F3GJ4BHyHCo0xGFK4CJNyHp4mJ5pOv0QVCVSZzjJRZRwQk6QtuHDOkmuKaANC
suxiIZW4/y7W7nHuFWUX/xX3ZsNtpJAgkcp/CV3KhP4jQUSsHSPASNppsheyT+Fv
4fXvM+Yyq832O6VwGDU/xCKQWtcfHOS1i/QLazTmaAIi13ff5vXv66h7cPEblsJM
sH82j8MuBAsh0CGVBSEflhwJvUUlorGs4vc/LOpMYCCvy2CQRLB+pO/cavh1STmJ
LfWF0Z1XAgMBAAECggEAPCfclT+4f4LDFOaaKAiFJOEMlGSy18xRCExmW6iwcbKL
pbCbhbOY2vgW95YStLBxR/NsIMJ7PovjyONAb67rs+2ptxjrlx13uhpTqs0WKANN
Ih8RygKh3uQ1Xcu/cVlSUi3IJ1oFf3ljqRaM8JzM/6axlqJB2mXArk3dtbbWgpzL
WfV0jF8p/K9Zg8J3kMfBf+iEd3/Heeq4oqlkeATNKMQUE44Scea0kEoQtpOMnMaC
WF0lp9e9InrQptI2h8ZNm1SbMq3u/V81GH0jd+UlAViXA6LY/yOEWlVmVabbUrJj
d3WRt1mc/DWgDtjDzh046xPxngX3uy7wmUMjtS6lcQKBgQD3kkRtM1Ca+mMZnLPY
+gaDySsVziHcNkAFGMEh/+fAV+JlGkpBUyLeyQGIC2KRs8cYuKkEhWnq1g8DhRDJ
0JRK3/lCFbcOPlM88Ngm1WDGznhWo5OsXgczeGH+hCaJUocLZG5If9dthlWGg1Y2
Z5y+77GBVPMpxTP54hSSJnFO9QKBgQDWIc16iAxCv3C98f4WQ86SvPjdbiMIA68C
bhFt9lOU4I1fLrFG2m9f4+LIH078qvNFRCJne39vF+fIx77PDvZMDVy66BdKw3hc
S93+U3WmaiyT3j+D5h2yTQ9DGtvq8r0dzNbGSzdqdiHjc8uXhe+gxBug2PYMlNSu
GhmCdQwzmwKBgAv8e+2hj2SBfOzPhnGZ4VjeE4TxvvfvdHgKs8cWobzRRHfKpw+0
m7qXlshkbLhLMPeEcUJzxyYEiSONfLuYqqVZZLMLZBp/b/5CVuTCbfYSJwdi0hKF
VunqCSyOb2M0qK8nhKNj9SUrXNavYywtJgykhD6Tw1YhYxvVE1PkIpZFAoGBANYc
yLS78t6PRHF51uJ2fMk3UfU/2qF55XYdjyoQA7U678F8E+FQK8uLN8l5nOaDHWtm
XKxyzZLNKYQXTtEGGfsj5VQzHI8yc1h+uARFeb+kLNzSf1opMAqIiTlFUx9UBwwU
NbHjpg66/tnLgIkLcPelACdOqoEcFKneCSHsXf3/AoGABi/BY/lnaBGFHwtke1DT
k2j/J9mHQaAkk/G+w2wt7VfQOk8GB3A6d/dnYK8PB93yp+xrUxSyca5KQtLrJgLZ
s6Lbd/nwKnjGfJAUFgW2t4JkrSsqfeVgPY2x9A6jkc2sQKwovgNaczS9dcM/woKA
U/HdzBAeONI+xCSeHqJk/tc=
-----END PRIVATE KEY-----`

const fixedKeyB = `-----BEGIN PRIVATE KEY-----
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQC4jprQwNbdXPDF
7Qz9g4tNEuQQvkh12PObU4qNL/tFSAF53AmBWm1wpTRjJGsBVSZS6cfqWVB6fxq1
sMrH2Ia1r5o9wQThnrUmA51gPy/xuuzIocAmT6FK4cx26a6BTdmS2R/n43TsmD1W
iFz6W7NTSWvwG2gTPJtE7khlm6EVXiwmQcKOSFXFyhCAirYDfTF5uygEbtefa5eh
8Xg8XERsuQakFj+URMZf1rdFDur63MvKht38tbbKlzmUkMtCiO8yhkvR8+74smLl
b0bHfNfSajz7hTnudONPBC9satIqKnAwPjK7tsaCxjlxH6VhRJlefN92HskkTr16
5K2bjS2XAgMBAAECgf9PWymFNu/KPyxcFhuTg/x1igxfThABiJaZWqFgFBoyEokG
F/lgzM/zPT1dFSRQH5upvGX+mXyLL36HtRqQDuzxMnzk1bemENMOhWuv4yzOEuDR
PLvE+Hh1zgPhuzbD7Hp5+OJwcKwRD4xkC1IWyrnHAnw/mpzqlOm4fuRTkUjZq3Ke
IeGsTZ+AveGFS8JlIl+0o4dcR4gIhbva/Otgn8H47QD+NyG5XxGpPKRUXkoaiWqV
CQxiEtXjfU+qFg3gN/9rIkgsDMboeCuSpoUjznzhcSGhRb4ep4oaALj5DW2ePUEj
mBSY2CsLg0/Y1zrNARlW02s9avALia60iV6427kCgYEA7w4yfujsx7WW3v/fq5sk
XcZxe+jTGaAs560qv/8E9YIJBUgBQM6M+yxGtz5AquZqgI12VvnWN78zqGQGzmaC
dEs5suVuHcrgFceiGsJPVqCU5rs4YcJ+k6ccNAE3DiFyhv12rLCQHULnfVs7bHLg
wOdlo+s1KeVRHyDbGdJUmgsCgYEAxaOAaus76tMQT3vIzTpwcSStqq2s/SK4V2sj
BFCmbHqKUEM+B63UAPk/JmyS2TDCH9kVrhxZtd/ggimIUQdmICcJq+QO+Eam04w9
TWy23jt6bg5X9r7Ofo6sSDi9ejNad0GfTFo4Bf70+3jS3rT0+/t4OFkzoTYDcLRo
N5b0/iUCgYEAhMGCo13hGKsshNzeLuOyV2172k8a5JFCPsq5AfSyoVC8h7VMFNxg
CKC3CM5GhWH+ZTOqM3T9VOoW2v3plbfx3HlmKoYlF+Bxf0blLC0aeEYnStdP4WJs
frz/+ZVvKKbEfljGDfLjpYxhGAmRP5GwZRBcLqLRXFngKgRKCNX4a68CgYEAnkA5
B2Or6m9uU/aN5qaweiggVtYR+e7fJEBJHZ9mYt4L+hCdjpCFfPIWurGdNANyrQWp
8mwI+TR2FEMlP5xpDb20ZMqLogkQc7uLKn+uPWvqsE0T6iMGPRgIoxurvDl6aptE
7mIfEc4AY4tvbZv/vfSxYo0qZh9Vydzqxfg923ECgYA1kHM4KhKnkPvhDUTkMFjs
X1FVsiGOilmFyrREOR4NF7NriywAWPNKYemSr2NjkHiVa5qMioGbpqTqYO6cRW4h
uzFJ6FzU4Xsb/OtEBU97+xJ7u+765c44/JuoYPjXca1P9UpMnG4rAS1Esade+bAV
APvy+f45Hffx1U1YGvjLrw==
-----END PRIVATE KEY-----`
