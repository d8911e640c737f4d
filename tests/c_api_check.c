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
