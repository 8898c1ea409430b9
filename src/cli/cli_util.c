#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "ssae_json.h"
#include "ssae_shard.h"

/* One expansion for every command and for the shard list (ssae_shard.h), so
 * that `ssae score DIR` and a shard of DIR see the same files in the same
 * order. */
int ssae_cli_collect(char *const *args, int n, char ***paths, size_t *count,
                     ssae_err *err) {
  return ssae_paths_expand(args, n < 0 ? 0 : (size_t)n, paths, count, err);
}

void ssae_cli_free_paths(char **paths, size_t count) { ssae_paths_free(paths, count); }

void ssae_cli_json_str(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  fputc('"', f);
  while (*s) {
    unsigned char c = *s;
    int n = ssae_utf8_len(s);
    if (!n) {
      fputs("\\ufffd", f);
      s++;
    } else if (c == '"' || c == '\\') {
      fprintf(f, "\\%c", c);
      s++;
    } else if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
      s++;
    } else {
      fwrite(s, 1, (size_t)n, f);
      s += n;
    }
  }
  fputc('"', f);
}

int ssae_cli_stdout_tty(void) { return isatty(STDOUT_FILENO); }
int ssae_cli_stderr_tty(void) { return isatty(STDERR_FILENO); }

void ssae_cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ssae %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
