// Incremental SHA-256 (OpenSSL's libcrypto), for the checksums of uploaded
// files.
#ifndef EXPERTD_SERVER_JOBS_SHA256_H_
#define EXPERTD_SERVER_JOBS_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace expertd::server::jobs {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view bytes);
  // The digest of everything given, as 64 lower-case hex digits. Call once.
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_SHA256_H_
