// URL normalization (core/io/url.h) and address classes (core/io/ip_address.h): the tables of
// hostile spellings the data-root and remote-access checks rely on. Pure functions; nothing here
// touches the network.
#include "core/io/url.h"

#include <string>
#include <vector>

#include "core/io/ip_address.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

struct Case {
  const char* in;
  const char* out;
};

TEST(NormalizeUrlTest, SpellingsOfOneUrlNormalizeAlike) {
  const std::vector<Case> cases = {
      {"HTTP://Example.COM:80/a/b", "http://example.com/a/b"},
      {"https://example.com:443/a", "https://example.com/a"},
      {"https://example.com:8443/a", "https://example.com:8443/a"},
      {"http://example.com./a", "http://example.com/a"},
      {"http://h/a/./b/../c", "http://h/a/c"},
      {"http://h/a/%2e%2e/c", "http://h/c"},
      {"http://h/a/%2E%2e/c", "http://h/c"},
      {"http://h/a/.%2e/c", "http://h/c"},
      {"http://h/a//b///c", "http://h/a/b/c"},
      {"http://h/%7euser/%41%62c", "http://h/~user/Abc"},
      {"http://h/a%3fb%2a", "http://h/a%3Fb%2A"},
      {"http://h/dir/", "http://h/dir/"},
      {"http://h/dir/sub/..", "http://h/dir/"},
      {"http://h", "http://h"},
      {"http://h/a?x=1&y=%2e", "http://h/a?x=1&y=%2e"},
      {"http://h/a#frag", "http://h/a"},
      {"http://user:pw@h/a", "http://h/a"},
      // Numeric IPv4 hosts: what curl and browsers connect to.
      {"http://2852039166/latest", "http://169.254.169.254/latest"},
      {"http://0xA9FEA9FE/latest", "http://169.254.169.254/latest"},
      {"http://0xa9.0xfe.0xa9.0xfe/", "http://169.254.169.254/"},
      {"http://0251.0376.0251.0376/", "http://169.254.169.254/"},
      {"http://169.254.43518/", "http://169.254.169.254/"},
      {"http://169.16689662/", "http://169.254.169.254/"},
      {"http://127.1/", "http://127.0.0.1/"},
      {"http://0/", "http://0.0.0.0/"},
      {"http://017700000001/", "http://127.0.0.1/"},
      {"http://[::FFFF:169.254.169.254]/", "http://[::ffff:169.254.169.254]/"},
      {"http://[0:0:0:0:0:0:0:1]:8080/x", "http://[::1]:8080/x"},
      // Buckets are names, never addresses.
      {"S3://Bucket/Data/../x", "s3://bucket/x"},
      {"s3://logs.2024/a", "s3://logs.2024/a"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Url> u = NormalizeUrl(c.in);
    ASSERT_TRUE(u.ok()) << c.in << ": " << u.status();
    EXPECT_EQ(u->ToString(), c.out) << c.in;
  }
}

TEST(NormalizeUrlTest, AmbiguousUrlsAreRefused) {
  for (const char* bad : {
           "no-scheme/a",
           "http://h/a/../../etc/passwd",   // climbs above the root
           "s3://bucket/../other/key",      // path-style: another bucket
           "http://h/%2e%2e/%2e%2e/x",
           "http://h/a%2f..%2fb",           // an encoded slash
           "http://h/a%5c..%5cb",           // an encoded backslash
           "http://h/a\\..\\b",             // a backslash
           "http://h/a%zz",                 // a bad escape
           "http://h/a%2",                  // a cut escape
           "http://[fe80::1%25eth0]/",      // an IPv6 zone
           "http://[::1/",                  // an unclosed bracket
           "http://h:99999/",               // a port out of range
           "http://h:0/",
           "http://h:8a/",
           "http://1.2.3.999/",             // ends in a number, not an address
           "http://256.1.1.1/",
           "http://foo.0x10/",
           "http://exa%6dple.com/",         // escapes in a host
           "http:///a",                     // no host
       }) {
    absl::StatusOr<Url> u = NormalizeUrl(bad);
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument)
        << bad << " -> " << (u.ok() ? u->ToString() : u.status().ToString());
  }
}

TEST(NormalizeUrlTest, ErrorsAndRedactionHideCredentialsAndQueries) {
  EXPECT_EQ(RedactUrl("https://AKID:secret@host:8443/p/a?X-Amz-Signature=abc#f"),
            "https://host:8443/p/a");
  EXPECT_EQ(RedactUrl("s3://bucket/key?versionId=1"), "s3://bucket/key");
  EXPECT_EQ(RedactUrl("/local/path?x"), "/local/path?x");
  absl::StatusOr<Url> u = NormalizeUrl("http://user:hunter2@h/a%zz?token=t0ps3cret");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message().find("hunter2"), std::string::npos) << u.status();
  EXPECT_EQ(u.status().message().find("t0ps3cret"), std::string::npos) << u.status();
  EXPECT_NE(u.status().message().find("http://h/a%zz"), std::string::npos) << u.status();
}

TEST(NormalizeUrlTest, PortsAndAuthority) {
  absl::StatusOr<Url> u = NormalizeUrl("http://H:80/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->EffectivePort(), 80);
  EXPECT_EQ(u->Authority(), "h");
  u = NormalizeUrl("https://[::1]:9000/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->EffectivePort(), 9000);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->Authority(), "[::1]:9000");
}

struct ClassCase {
  const char* address;
  AddressClass want;
};

TEST(ClassifyAddressTest, OnlyPublicAddressesArePublic) {
  const std::vector<ClassCase> cases = {
      {"169.254.169.254", AddressClass::kLinkLocal},
      {"169.254.0.1", AddressClass::kLinkLocal},
      {"fe80::1", AddressClass::kLinkLocal},
      {"febf::1", AddressClass::kLinkLocal},
      {"127.0.0.1", AddressClass::kLoopback},
      {"127.255.255.254", AddressClass::kLoopback},
      {"::1", AddressClass::kLoopback},
      {"10.0.0.1", AddressClass::kPrivate},
      {"172.16.0.1", AddressClass::kPrivate},
      {"172.31.255.255", AddressClass::kPrivate},
      {"192.168.1.1", AddressClass::kPrivate},
      {"100.64.0.1", AddressClass::kPrivate},
      {"100.127.255.255", AddressClass::kPrivate},
      {"fc00::1", AddressClass::kPrivate},
      {"fd00:ec2::254", AddressClass::kPrivate},  // AWS's IPv6 metadata service
      {"0.0.0.0", AddressClass::kUnspecified},
      {"0.1.2.3", AddressClass::kUnspecified},
      {"::", AddressClass::kUnspecified},
      {"224.0.0.1", AddressClass::kMulticast},
      {"255.255.255.255", AddressClass::kMulticast},
      {"ff02::1", AddressClass::kMulticast},
      {"240.0.0.1", AddressClass::kReserved},
      {"192.0.0.192", AddressClass::kReserved},
      // IPv4 inside IPv6 has the embedded address's class.
      {"::ffff:169.254.169.254", AddressClass::kLinkLocal},
      {"::ffff:127.0.0.1", AddressClass::kLoopback},
      {"::ffff:10.1.2.3", AddressClass::kPrivate},
      {"64:ff9b::a9fe:a9fe", AddressClass::kLinkLocal},
      {"2002:a9fe:a9fe::1", AddressClass::kLinkLocal},
      {"::127.0.0.1", AddressClass::kReserved},
      // Public.
      {"8.8.8.8", AddressClass::kPublic},
      {"172.32.0.1", AddressClass::kPublic},
      {"100.128.0.1", AddressClass::kPublic},
      {"169.253.255.255", AddressClass::kPublic},
      {"2600:1f18::1", AddressClass::kPublic},
      {"::ffff:8.8.8.8", AddressClass::kPublic},
  };
  for (const ClassCase& c : cases) {
    absl::StatusOr<IpAddress> a = IpAddress::Parse(c.address);
    ASSERT_TRUE(a.ok()) << c.address << ": " << a.status();
    EXPECT_EQ(ClassifyAddress(*a), c.want)
        << c.address << " is " << AddressClassName(ClassifyAddress(*a)) << ", want "
        << AddressClassName(c.want);
  }
  EXPECT_FALSE(IpAddress::Parse("2852039166").ok());  // only canonical text here
  EXPECT_FALSE(IpAddress::Parse("[::1]").ok());
}

}  // namespace
}  // namespace sluice
