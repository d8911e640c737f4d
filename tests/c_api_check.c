/* Compiled as C: the C header must be valid C and usable on its own. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "flash/flash.h"

/* Runs a tiny problem on the reference backend; returns the status. */
int flash_c_check_run(float* out_first) {
  float q[2 * 4], k[3 * 4], v[3 * 4], o[2 * 4];
  for (int i = 0; i < 8; ++i) q[i] = 0.1f * (float)i - 0.3f;
  for (int i = 0; i < 12; ++i) {
    k[i] = 0.05f * (float)i - 0.2f;
    v[i] = 0.5f - 0.07f * (float)i;
  }
  flash_attention_desc desc;
  flash_desc_init(&desc);
  desc.seqlen_q = 2;
  desc.seqlen_kv = 3;
  desc.head_dim = 4;
  desc.backend = FLASH_BACKEND_REFERENCE;
  int status = flash_attention(&desc, q, k, v, o);
  *out_first = o[0];
  return status;
}

/* A bad descriptor: returns the status; the message lands in flash_last_error(). */
int flash_c_check_bad(int which) {
  float buffer[64];
  flash_attention_desc desc;
  flash_desc_init(&desc);
  desc.seqlen_q = 2;
  desc.seqlen_kv = 2;
  desc.head_dim = 4;
  switch (which) {
    case 0:
      desc.head_dim = 0;
      break;
    case 1:
      desc.dtype = 9;
      break;
    case 2:
      desc.backend = 17;
      break;
    case 3:
      return flash_attention(NULL, buffer, buffer, buffer, buffer + 32);
    default:
      return flash_attention(&desc, NULL, buffer, buffer, buffer + 32);
  }
  return flash_attention(&desc, buffer, buffer, buffer, buffer + 32);
}

/* Inference fields from C: a packed batch of two sequences (lengths 1 and 2 over 3 keys
 * each) with lse, then merge_partials of that result with an empty part (lse = -inf),
 * which must give it back. Returns the first failing status; *max_diff: merged vs direct. */
int flash_c_check_inference(float* max_diff) {
  float q[3 * 4], k[6 * 4], v[6 * 4], o[3 * 4], parts[2 * 3 * 4], merged[3 * 4];
  float lse[3], lse_parts[2 * 3];
  const int32_t cu_q[3] = {0, 1, 3}, cu_kv[3] = {0, 3, 6};
  for (int i = 0; i < 12; ++i) q[i] = 0.1f * (float)i - 0.4f;
  for (int i = 0; i < 24; ++i) {
    k[i] = 0.03f * (float)i - 0.3f;
    v[i] = 0.6f - 0.05f * (float)i;
  }
  flash_attention_desc desc;
  flash_desc_init(&desc);
  desc.batch = 2;
  desc.seqlen_q = 2;
  desc.seqlen_kv = 3;
  desc.head_dim = 4;
  desc.cu_seqlens_q = cu_q;
  desc.cu_seqlens_kv = cu_kv;
  desc.lse = lse;
  desc.backend = FLASH_BACKEND_REFERENCE;
  int status = flash_attention(&desc, q, k, v, o);
  if (status != FLASH_STATUS_OK) return status;
  for (int i = 0; i < 12; ++i) {
    parts[i] = o[i];
    parts[12 + i] = 5.0f; /* ignored: its lse is -inf */
  }
  for (int i = 0; i < 3; ++i) {
    lse_parts[i] = lse[i];
    lse_parts[3 + i] = -INFINITY;
  }
  desc.lse = NULL;
  status = flash_merge_partials(&desc, 2, parts, lse_parts, merged, NULL);
  *max_diff = 0.0f;
  for (int i = 0; i < 12; ++i) {
    const float d = fabsf(merged[i] - o[i]);
    if (!(d <= *max_diff)) *max_diff = d; /* NaN becomes the difference */
  }
  return status;
}

/* page_size set without a block table: FLASH_STATUS_INVALID_ARGUMENT naming page_size. */
int flash_c_check_bad_page(void) {
  float buffer[64];
  flash_attention_desc desc;
  flash_desc_init(&desc);
  desc.seqlen_q = 2;
  desc.seqlen_kv = 2;
  desc.head_dim = 4;
  desc.page_size = 16;
  return flash_attention(&desc, buffer, buffer, buffer, buffer + 32);
}
