// How a Sluice process secures its gRPC: a server's TLS, token and request-size limit
// (ServerSecurity), and a client's TLS and token (ChannelSecurity, MakeChannelFactory). Built on
// core/rpc/tls_credentials.h and core/rpc/token_auth.h; the protocol is written up in docs/SERVICE.md,
// "Security".
//
//   ServerSecurity security{.tls = {...}, .token = token};
//   grpc::ServerBuilder builder;
//   RETURN_IF_ERROR(AddSecureListeningPort(security, "127.0.0.1:0", &builder, &port));
//   ... builder.RegisterService(service) (each handler calls TokenAuth::Check) ...
//
//   ASSIGN_OR_RETURN(GrpcChannelFactory channels, MakeChannelFactory({.tls = {...}, .token = t}));
//   auto stub = proto::CoordinatorService::NewStub(channels("coordinator:5000"));
//
// Thread safety: the functions are thread-safe; a GrpcChannelFactory may be called from any
// thread.
#ifndef SLUICE_CORE_GRPC_SECURITY_H_
#define SLUICE_CORE_GRPC_SECURITY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/rpc/tls_credentials.h"
#include "core/rpc/token_auth.h"
#include "grpcpp/channel.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"

namespace sluice {

struct ServerSecurity {
  // TLS identity and client checks; all empty: plaintext.
  TlsServerFiles tls = {};
  // Shared token every call of the server's own services must carry; empty: none required.
  // (The gRPC health and reflection services stay open: probes carry no token.)
  std::string token = {};
  // Largest request message accepted (bytes); a larger one is RESOURCE_EXHAUSTED before any
  // handler runs. -1: no limit.
  int max_receive_message_bytes = 64 << 20;
};

// Adds the listening port `listen` ("host:port") to `builder` with the credentials of
// `security`, sets the receive limit, accepts clients' keepalive pings (ChannelLimits), and
// installs the interceptor that turns a request gRPC
// could not parse (INTERNAL from protobuf) into INVALID_ARGUMENT naming the method. `*port`
// receives the bound port once the server is built. Errors of MakeServerCredentials.
absl::Status AddSecureListeningPort(const ServerSecurity& security, const std::string& listen,
                                    grpc::ServerBuilder* builder, int* port);

// The interceptor AddSecureListeningPort installs: a request gRPC could not parse becomes
// INVALID_ARGUMENT naming the method. ServerBuilder::experimental().SetInterceptorCreators
// replaces the whole list, so a server that sets its own interceptors after
// AddSecureListeningPort must put this one in its list too. The methods in `self_checked`
// ("/package.Service/Method") get no interceptor: their handlers take the raw bytes and answer
// INVALID_ARGUMENT themselves when they do not parse (with kMalformedRequestMessage).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeMalformedRequestInterceptorFactory(std::vector<std::string> self_checked = {});

// "<method>: malformed request (not a valid protocol buffer message)": the INVALID_ARGUMENT
// message for a request that does not parse.
std::string MalformedRequestMessage(absl::string_view method);

// The receive limit and HTTP/2 keepalive of a client's channels.
struct ChannelLimits {
  // Largest message received (bytes); a larger one fails its call with RESOURCE_EXHAUSTED.
  // -1: no limit.
  int max_receive_message_bytes = -1;
  // Keepalive: the channel pings its connection after keepalive_time without a frame (also
  // while calls wait for data, pings never limited to a few without data) and drops it when a
  // ping is not answered within keepalive_timeout, failing its calls with UNAVAILABLE: a
  // silent partition or a frozen peer ends in a retry instead of a hang. A server must permit
  // pings this often (AddServerKeepalive). absl::InfiniteDuration(): no pings.
  absl::Duration keepalive_time = absl::InfiniteDuration();
  absl::Duration keepalive_timeout = absl::Seconds(10);
};

// Sets `limits` on `args`.
void ApplyChannelLimits(const ChannelLimits& limits, grpc::ChannelArguments* args);

// A server's own keepalive: pings each client connection after `time` without a frame and
// drops it when a ping is not answered within `timeout` (ending its calls). Clients' pings are
// accepted by every server AddSecureListeningPort set up, however often, with or without
// calls (never answered with GOAWAY "too_many_pings").
void AddServerKeepalive(absl::Duration time, absl::Duration timeout,
                        grpc::ServerBuilder* builder);

struct ChannelSecurity {
  TlsChannelFiles tls = {};
  // Sent as `authorization: Bearer <token>` on every call; empty: nothing sent.
  std::string token = {};
  // TLS: the name the server's certificate must carry, when the address does not (dialing
  // by IP a certificate made for a DNS name). Empty: the address's host.
  std::string tls_server_name = {};
  // Receive limit and keepalive of the channels (ChannelLimits).
  ChannelLimits limits = {};
};

using GrpcChannelFactory =
    std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

// The longest wait between a channel's attempts to reconnect to a peer that went away.
inline constexpr int kMaxReconnectBackoffMs = 1000;

// Channels with the security's credentials and token, security.limits, a connection
// of their own (as client/service_step_source.h's DefaultChannel) and reconnect attempts at
// most kMaxReconnectBackoffMs apart. Errors of MakeChannelCredentials; the files are read
// once, here.
absl::StatusOr<GrpcChannelFactory> MakeChannelFactory(const ChannelSecurity& security);

// The ServerSecurity that the server flags name (coordinator and worker mains): TLS files,
// --tls_client_auth, the token read from `token_file` (empty: none) and the size limit.
// Errors of MakeServerCredentials (the files are checked here, before serving) and
// ReadTokenFile.
absl::StatusOr<ServerSecurity> ServerSecurityFromFlags(const std::string& tls_cert,
                                                       const std::string& tls_key,
                                                       const std::string& tls_ca,
                                                       bool tls_client_auth,
                                                       const std::string& token_file,
                                                       int max_receive_message_bytes);

}  // namespace sluice

#endif  // SLUICE_CORE_GRPC_SECURITY_H_
