/* Compiles llhttp's http.c from --with-llhttp=DIR (Debian node-llhttp). */
#include <http.c>
