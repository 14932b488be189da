/* Board support for an STM32F405 (Cortex-M4F, 168 MHz), at register level: the few registers the rig firmware
 * needs, named and laid out as in the reference manual RM0090 (rev 19), section numbers below.
 *
 *   clock     HSI 16 MHz -> PLL -> 168 MHz SYSCLK, AHB 168, APB1 42 (timers 84), APB2 84 MHz (§6)
 *   µs clock  TIM2, 32 bit, free running at 1 MHz: it wraps at 2^32 µs as the core expects (§18)
 *   wake-up   SysTick at SYSCLK, an interrupt every BSP_TICK_US (Cortex-M4 Generic User Guide §4.4)
 *   link      USART1 on PA9 (TX) / PA10 (RX), AF7: receive interrupt into a ring; the transmit-empty interrupt
 *             and the idle loop move bytes from the port's ring (§30); the rig file's baud
 *   servos    PWM mode 1 at the hobby-servo frame (BSP_SERVO_FRAME_US), 1 µs resolution: servo 0-3 on
 *             TIM3 CH1-4 (PC6-PC9), servo 4-7 on TIM4 CH1-4 (PB6-PB9), AF2 (§18)
 *   feedback  the pulse width each timer is generating, read back from its CCR (hobby servos report no position)
 *   sensors   ADC1 single conversions, channel k = ADC1_INk (PA0-PA7, PB0-PB1, PC0-PC5), 12 bit, through a bridge
 *             amplifier biased at mid-rail: counts = DR - 2048 (§13)
 *   e-stop    PB12, pull-up, a normally-closed button to ground: high = pressed or wire cut (§8)
 *   idle      WFI until the next interrupt (the SysTick bounds the sleep to BSP_TICK_US)
 *
 * Built with -DBSP_PRESET_CLOCKS for QEMU's netduinoplus2 (docs/firmware.md, "The board port"): QEMU does not
 * model the RCC (its reads are 0: the PLL would never report lock), runs the core at 168 MHz from reset and
 * clocks TIM2-TIM5 at 1 GHz (hw/arm/stm32f405_soc.c), so that build leaves the clock tree alone and divides
 * the timers' clock by 1000 instead of 84. Nothing else differs.
 */
#include "bsp.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

/* §2.3 memory map */
#define RCC_BASE 0x40023800u
#define FLASH_R_BASE 0x40023C00u
#define GPIOA_BASE 0x40020000u
#define GPIOB_BASE 0x40020400u
#define GPIOC_BASE 0x40020800u
#define USART1_BASE 0x40011000u
#define TIM2_BASE 0x40000000u
#define TIM3_BASE 0x40000400u
#define TIM4_BASE 0x40000800u
#define ADC1_BASE 0x40012000u
#define ADC_COMMON_BASE 0x40012300u

/* §6.3 RCC registers */
#define RCC_CR REG(RCC_BASE + 0x00u)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
#define RCC_PLLCFGR REG(RCC_BASE + 0x04u)
#define RCC_CFGR REG(RCC_BASE + 0x08u)
#define RCC_CFGR_SW_PLL 0x2u
#define RCC_CFGR_SWS_MASK (0x3u << 2)
#define RCC_CFGR_SWS_PLL (0x2u << 2)
#define RCC_CFGR_PPRE1_DIV4 (0x5u << 10)
#define RCC_CFGR_PPRE2_DIV2 (0x4u << 13)
#define RCC_AHB1ENR REG(RCC_BASE + 0x30u)
#define RCC_APB1ENR REG(RCC_BASE + 0x40u)
#define RCC_APB2ENR REG(RCC_BASE + 0x44u)
#define RCC_AHB1ENR_GPIOAEN (1u << 0)
#define RCC_AHB1ENR_GPIOBEN (1u << 1)
#define RCC_AHB1ENR_GPIOCEN (1u << 2)
#define RCC_APB1ENR_TIM2EN (1u << 0)
#define RCC_APB1ENR_TIM3EN (1u << 1)
#define RCC_APB1ENR_TIM4EN (1u << 2)
#define RCC_APB2ENR_USART1EN (1u << 4)
#define RCC_APB2ENR_ADC1EN (1u << 8)
/* PLL from HSI (16 MHz): VCO in = 16 / M = 1 MHz, VCO out = × N = 336 MHz, SYSCLK = / P = 168 MHz,
 * USB/SDIO = / Q = 48 MHz (§6.3.2: PLLM[5:0], PLLN[14:6], PLLP[17:16] 00 = /2, PLLSRC[22] 0 = HSI, PLLQ[27:24]) */
#define PLL_M 16u
#define PLL_N 336u
#define PLL_Q 7u

/* §3.9 flash access control: 5 wait states at 168 MHz and 2.7-3.6 V (table 10), prefetch and caches on */
#define FLASH_ACR REG(FLASH_R_BASE + 0x00u)
#define FLASH_ACR_5WS_PRFTEN_ICEN_DCEN (5u | (1u << 8) | (1u << 9) | (1u << 10))

/* §8.4 GPIO registers */
#define GPIO_MODER(base) REG((base) + 0x00u)
#define GPIO_PUPDR(base) REG((base) + 0x0Cu)
#define GPIO_IDR(base) REG((base) + 0x10u)
#define GPIO_AFRL(base) REG((base) + 0x20u)
#define GPIO_AFRH(base) REG((base) + 0x24u)
#define MODE_ALTERNATE 0x2u
#define MODE_ANALOG 0x3u
#define PULL_UP 0x1u
#define AF_TIM3_TIM4 2u
#define AF_USART1 7u

/* §30.6 USART registers */
#define USART1_SR REG(USART1_BASE + 0x00u)
#define USART1_DR REG(USART1_BASE + 0x04u)
#define USART1_BRR REG(USART1_BASE + 0x08u)
#define USART1_CR1 REG(USART1_BASE + 0x0Cu)
#define USART_SR_ORE (1u << 3)
#define USART_SR_RXNE (1u << 5)
#define USART_SR_TXE (1u << 7)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_RXNEIE (1u << 5)
#define USART_CR1_TXEIE (1u << 7)
#define USART_CR1_UE (1u << 13)
#define USART1_IRQ 37u                     /* §12.2 table 61 */

/* §18.4 TIM2-TIM5 registers */
#define TIM_CR1(base) REG((base) + 0x00u)
#define TIM_EGR(base) REG((base) + 0x14u)
#define TIM_CCMR1(base) REG((base) + 0x18u)
#define TIM_CCMR2(base) REG((base) + 0x1Cu)
#define TIM_CCER(base) REG((base) + 0x20u)
#define TIM_PSC(base) REG((base) + 0x28u)
#define TIM_ARR(base) REG((base) + 0x2Cu)
#define TIM_CNT(base) REG((base) + 0x24u)
#define TIM_CCR(base, ch) REG((base) + 0x34u + 4u * (ch))
#define TIM_CR1_CEN (1u << 0)
#define TIM_CR1_ARPE (1u << 7)
#define TIM_EGR_UG (1u << 0)
/* both channels of a CCMR in PWM mode 1 (OCxM = 110) with the preload on (OCxPE): a new CCR takes effect at the
 * next frame, never inside a pulse */
#define TIM_CCMR_PWM1_PRELOAD_BOTH ((0x6u << 4) | (1u << 3) | (0x6u << 12) | (1u << 11))
#define TIM_CCER_CC1E_TO_CC4E ((1u << 0) | (1u << 4) | (1u << 8) | (1u << 12))

/* §13.13 ADC registers */
#define ADC1_SR REG(ADC1_BASE + 0x00u)
#define ADC1_CR2 REG(ADC1_BASE + 0x08u)
#define ADC1_SMPR1 REG(ADC1_BASE + 0x0Cu)
#define ADC1_SMPR2 REG(ADC1_BASE + 0x10u)
#define ADC1_SQR1 REG(ADC1_BASE + 0x2Cu)
#define ADC1_SQR3 REG(ADC1_BASE + 0x34u)
#define ADC1_DR REG(ADC1_BASE + 0x4Cu)
#define ADC_CCR REG(ADC_COMMON_BASE + 0x04u)
#define ADC_SR_EOC (1u << 1)
#define ADC_CR2_ADON (1u << 0)
#define ADC_CR2_SWSTART (1u << 30)
#define ADC_CCR_ADCPRE_DIV4 (0x1u << 16)   /* ADCCLK = 84 / 4 = 21 MHz (at most 36 MHz, DS8626) */
/* 84 ADC clocks of sampling per channel (SMPx = 100): a bridge amplifier's output impedance */
#define ADC_SMPR_84_CYCLES_ALL 0x24924924u
#define ADC_MID_RAIL 2048
/* a conversion takes 84 + 12 ADC clocks = 4.6 µs at 21 MHz: a bound on the wait, so a failed ADC cannot stall
 * the loop (QEMU's model never sets EOC: it makes the value when DR is read) */
#define ADC_CONVERSION_BOUND_US 10u

/* Cortex-M4 core (Generic User Guide §4.2 NVIC, §4.4 SysTick) */
#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define SYST_CSR_ENABLE_TICKINT_CPUCLK 0x7u
#define NVIC_ISER(n) REG(0xE000E100u + 4u * (n))

#define SYSCLK_HZ 168000000u
#define APB2_HZ 84000000u
#ifdef BSP_PRESET_CLOCKS
#define TIMER_APB1_HZ 1000000000u          /* QEMU's model */
#else
#define TIMER_APB1_HZ 84000000u            /* APB1 prescaled: its timers run at twice PCLK1 (§6.2) */
#endif
#define BSP_TICK_US 100u                   /* SysTick period: the longest sleep */
#define BSP_SERVO_FRAME_US 20000u          /* hobby servo frame: 50 Hz */
#define ESTOP_PIN 12u                      /* PB12 */
#define ESTOP_RELEASE_US 20000u            /* a release counts once the input has been low this long */
#define RX_RING_BYTES 1024u                /* 11 ms of bytes at 921600 baud */

const uint8_t bsp_pwm_channels = 8, bsp_adc_channels = 16;

static volatile uint8_t rx_ring[RX_RING_BYTES];
static volatile uint32_t rx_head, rx_tail;
/* what the interrupt saw: bytes lost to a full ring, USART overruns (for a debugger; LINK_STATS counts the
 * sequence gaps they cause) */
volatile uint32_t bsp_rx_ring_full, bsp_rx_overruns, bsp_adc_timeouts;

void SysTick_Handler(void);
void USART1_IRQHandler(void);

/* Its only work is to end a WFI (bsp_idle). */
void SysTick_Handler(void) {}

static void clocks_init(void) {
#ifndef BSP_PRESET_CLOCKS
    FLASH_ACR = FLASH_ACR_5WS_PRFTEN_ICEN_DCEN;        /* before the clock goes up (§3.5.1) */
    RCC_PLLCFGR = PLL_M | (PLL_N << 6) | (0u << 16) | (PLL_Q << 24);
    RCC_CR |= RCC_CR_PLLON;
    while (!(RCC_CR & RCC_CR_PLLRDY)) {}
    RCC_CFGR = RCC_CFGR_PPRE1_DIV4 | RCC_CFGR_PPRE2_DIV2 | RCC_CFGR_SW_PLL;
    while ((RCC_CFGR & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {}
#endif
    RCC_AHB1ENR |= RCC_AHB1ENR_GPIOAEN | RCC_AHB1ENR_GPIOBEN | RCC_AHB1ENR_GPIOCEN;
    RCC_APB1ENR |= RCC_APB1ENR_TIM2EN | RCC_APB1ENR_TIM3EN | RCC_APB1ENR_TIM4EN;
    RCC_APB2ENR |= RCC_APB2ENR_USART1EN | RCC_APB2ENR_ADC1EN;
}

/* One pin's mode (MODER, 2 bits), and its alternate function (AFRL/AFRH, 4 bits) when it has one. */
static void pin_mode(uint32_t port, uint32_t pin, uint32_t mode, uint32_t af) {
    GPIO_MODER(port) = (GPIO_MODER(port) & ~(0x3u << (2u * pin))) | (mode << (2u * pin));
    if (mode != MODE_ALTERNATE) return;
    if (pin < 8u) GPIO_AFRL(port) = (GPIO_AFRL(port) & ~(0xFu << (4u * pin))) | (af << (4u * pin));
    else GPIO_AFRH(port) = (GPIO_AFRH(port) & ~(0xFu << (4u * (pin - 8u)))) | (af << (4u * (pin - 8u)));
}

static void uart_init(uint32_t baud) {
    pin_mode(GPIOA_BASE, 9u, MODE_ALTERNATE, AF_USART1);
    pin_mode(GPIOA_BASE, 10u, MODE_ALTERNATE, AF_USART1);
    /* oversampling by 16: BRR = USARTDIV × 16 = f_PCLK2 / baud, rounded (§30.3.4); 921600 baud -> 0.16 % off */
    USART1_BRR = (APB2_HZ + baud / 2u) / baud;
    USART1_CR1 = USART_CR1_UE | USART_CR1_TE | USART_CR1_RE | USART_CR1_RXNEIE;
    NVIC_ISER(USART1_IRQ / 32u) = 1u << (USART1_IRQ % 32u);
}

/* TIM2 counts µs from 0 to 2^32 - 1 and wraps, with no interrupt: nothing to lose under load. */
static void clock_init(void) {
    TIM_PSC(TIM2_BASE) = TIMER_APB1_HZ / 1000000u - 1u;
    TIM_ARR(TIM2_BASE) = 0xFFFFFFFFu;
    TIM_EGR(TIM2_BASE) = TIM_EGR_UG;
    TIM_CR1(TIM2_BASE) = TIM_CR1_CEN;
}

static void pwm_timer_init(uint32_t tim) {
    TIM_PSC(tim) = TIMER_APB1_HZ / 1000000u - 1u;         /* 1 µs counter ticks */
    TIM_ARR(tim) = BSP_SERVO_FRAME_US - 1u;
    TIM_CCMR1(tim) = TIM_CCMR_PWM1_PRELOAD_BOTH;
    TIM_CCMR2(tim) = TIM_CCMR_PWM1_PRELOAD_BOTH;
    TIM_CCER(tim) = TIM_CCER_CC1E_TO_CC4E;
    TIM_EGR(tim) = TIM_EGR_UG;                             /* load PSC and ARR now */
    TIM_CR1(tim) = TIM_CR1_ARPE | TIM_CR1_CEN;
}

static void pwm_init(void) {
    for (uint32_t pin = 6u; pin <= 9u; pin++) {
        pin_mode(GPIOC_BASE, pin, MODE_ALTERNATE, AF_TIM3_TIM4);   /* TIM3 CH1-4 */
        pin_mode(GPIOB_BASE, pin, MODE_ALTERNATE, AF_TIM3_TIM4);   /* TIM4 CH1-4 */
    }
    pwm_timer_init(TIM3_BASE);
    pwm_timer_init(TIM4_BASE);
}

/* ADC1_INk's pin: IN0-7 PA0-PA7, IN8-9 PB0-PB1, IN10-15 PC0-PC5 (DS8626 table 7) */
static void adc_init(void) {
    for (uint32_t k = 0; k < 16u; k++) {
        if (k < 8u) pin_mode(GPIOA_BASE, k, MODE_ANALOG, 0u);
        else if (k < 10u) pin_mode(GPIOB_BASE, k - 8u, MODE_ANALOG, 0u);
        else pin_mode(GPIOC_BASE, k - 10u, MODE_ANALOG, 0u);
    }
    ADC_CCR = ADC_CCR_ADCPRE_DIV4;
    ADC1_SMPR1 = ADC_SMPR_84_CYCLES_ALL;
    ADC1_SMPR2 = ADC_SMPR_84_CYCLES_ALL;
    ADC1_SQR1 = 0u;                                       /* one conversion per start (L = 0) */
    ADC1_CR2 = ADC_CR2_ADON;
}

void bsp_init(uint32_t baud) {
    clocks_init();
    clock_init();
    pin_mode(GPIOB_BASE, ESTOP_PIN, 0u, 0u);              /* input */
    GPIO_PUPDR(GPIOB_BASE) = (GPIO_PUPDR(GPIOB_BASE) & ~(0x3u << (2u * ESTOP_PIN))) | (PULL_UP << (2u * ESTOP_PIN));
    pwm_init();
    adc_init();
    uart_init(baud);
    SYST_RVR = SYSCLK_HZ / 1000000u * BSP_TICK_US - 1u;
    SYST_CVR = 0u;
    SYST_CSR = SYST_CSR_ENABLE_TICKINT_CPUCLK;
}

uint32_t bsp_micros(void) { return TIM_CNT(TIM2_BASE); }

/* As many bytes from the transmit ring as the transmitter takes now: one or two on the part (TXE drops while a
 * byte waits), the whole ring under QEMU, whose USART is always empty. Called with the USART interrupt unable to
 * preempt (from the interrupt itself, or with interrupts masked): it moves tx_tail. */
static void tx_pump(void) {
    while ((USART1_SR & USART_SR_TXE) && tx_tail != tx_head) USART1_DR = tx_ring[tx_tail++ % TX_RING_BYTES];
    if (tx_tail == tx_head) USART1_CR1 &= ~USART_CR1_TXEIE;    /* ring empty: bsp_uart_kick starts it again */
}

void USART1_IRQHandler(void) {
    const uint32_t sr = USART1_SR;
    if (sr & (USART_SR_RXNE | USART_SR_ORE)) {
        const uint8_t byte = (uint8_t)USART1_DR;          /* reading SR then DR clears RXNE and ORE */
        if (sr & USART_SR_ORE) bsp_rx_overruns++;
        if (rx_head - rx_tail < RX_RING_BYTES) rx_ring[rx_head++ % RX_RING_BYTES] = byte;
        else bsp_rx_ring_full++;
    }
    if (USART1_CR1 & USART_CR1_TXEIE) tx_pump();
}

int bsp_uart_getc(void) {
    if (rx_tail == rx_head) return -1;
    return rx_ring[rx_tail++ % RX_RING_BYTES];
}

/* The transmit-empty interrupt drains the ring (QEMU models no DMA controller, so neither does this port). */
void bsp_uart_kick(void) { USART1_CR1 |= USART_CR1_TXEIE; }

static uint32_t pwm_timer(uint8_t channel) { return channel < 4u ? TIM3_BASE : TIM4_BASE; }

void bsp_pwm_write_us(uint8_t channel, float pulse_us) {
    const float frame = (float)(BSP_SERVO_FRAME_US - 1u);
    const float clamped = pulse_us < 0.0f ? 0.0f : (pulse_us > frame ? frame : pulse_us);
    TIM_CCR(pwm_timer(channel), channel % 4u) = (uint32_t)(clamped + 0.5f);
}

float bsp_servo_feedback(uint8_t channel) { return (float)TIM_CCR(pwm_timer(channel), channel % 4u); }

int32_t bsp_adc_read(uint8_t channel) {
    ADC1_SQR3 = channel;
    ADC1_CR2 = ADC_CR2_ADON | ADC_CR2_SWSTART;
    const uint32_t start = bsp_micros();
    while (!(ADC1_SR & ADC_SR_EOC)) {
        if (bsp_micros() - start > ADC_CONVERSION_BOUND_US) {
            bsp_adc_timeouts++;
            break;
        }
    }
    return (int32_t)(ADC1_DR & 0xFFFu) - ADC_MID_RAIL;   /* reading DR clears EOC */
}

/* Pressed at once (a press must never wait); released once the input has stayed low ESTOP_RELEASE_US. */
int bsp_estop_pressed(void) {
    static int pressed;
    static uint32_t low_since;
    const uint32_t now = bsp_micros();
    if (GPIO_IDR(GPIOB_BASE) & (1u << ESTOP_PIN)) {
        pressed = 1;
        low_since = now;
    } else if (pressed && now - low_since >= ESTOP_RELEASE_US) {
        pressed = 0;
    }
    return pressed;
}

/* The transmitter topped up, then WFI, with interrupts masked: a byte that arrived since the ring was last read
 * still wakes it (a pending interrupt ends WFI even under PRIMASK), and is handled once they are unmasked.
 * Topping up here as well as in the interrupt is what makes QEMU 7.2 transmit: its USART model raises no
 * transmit-empty interrupt (only the receive one). */
void bsp_idle(uint32_t max_us) {
    __asm volatile("cpsid i" ::: "memory");
    tx_pump();
    if (max_us != 0u && rx_tail == rx_head) __asm volatile("wfi" ::: "memory");
    __asm volatile("cpsie i" ::: "memory");
}
